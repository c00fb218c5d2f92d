"""A preview's app on the broker, with pika (AMQP 0-9-1), for tests/messaging.rs.

Usage: amqp.py ACTION [ARGS]; the connection from AMQP_PORT, AMQP_USER, AMQP_PASSWORD and
AMQP_VHOST. Prints one JSON object per line: what happened, and a refusal as
{"error": "<exception>: <broker's reply>"}.
"""

import json
import os
import sys
import time

import pika


def params():
    return pika.ConnectionParameters(
        host="127.0.0.1",
        port=int(os.environ["AMQP_PORT"]),
        virtual_host=os.environ["AMQP_VHOST"],
        credentials=pika.PlainCredentials(os.environ["AMQP_USER"], os.environ["AMQP_PASSWORD"]),
        connection_attempts=1,
        socket_timeout=10,
        blocked_connection_timeout=10,
        heartbeat=0,
    )


def error(e):
    return f"{type(e).__name__}: {e!r}"


def say(**what):
    print(json.dumps(what), flush=True)


def roundtrip():
    """Declares a queue, publishes to it and takes the message back."""
    connection = pika.BlockingConnection(params())
    channel = connection.channel()
    channel.queue_declare("hello", durable=True)
    body = f"hello from {os.environ['AMQP_VHOST']}".encode()
    channel.basic_publish("", "hello", body)
    got = None
    for _ in range(50):
        _, _, got = channel.basic_get("hello", auto_ack=True)
        if got is not None:
            break
        connection.sleep(0.1)
    say(sent=body.decode(), got=got.decode() if got is not None else None)
    connection.close()


def connect():
    connection = pika.BlockingConnection(params())
    connection.channel()
    say(connected=True)
    connection.close()


def connections(n):
    """Opens up to n connections, all kept open: how many the broker let in."""
    held = []
    for _ in range(n):
        try:
            connection = pika.BlockingConnection(params())
            connection.channel()
            held.append(connection)
        except Exception as e:
            say(opened=len(held), error=error(e))
            return
    say(opened=len(held), error=None)


def queues(n):
    """Declares up to n queues: how many the broker let be."""
    connection = pika.BlockingConnection(params())
    for i in range(n):
        try:
            connection.channel().queue_declare(f"q{i}")
        except Exception as e:
            say(declared=i, error=error(e))
            return
    say(declared=n, error=None)


def channels(n):
    """Opens up to n channels on one connection: how many the broker let be."""
    connection = pika.BlockingConnection(params())
    held = []
    for _ in range(n):
        try:
            held.append(connection.channel())
        except Exception as e:
            say(opened=len(held), error=error(e))
            return
    say(opened=len(held), error=None)


def headers(count, size):
    """Publishes count empty-bodied messages carrying size bytes of headers each, confirmed:
    what the queue kept (max-length-bytes counts bodies, so only the count bounds these)."""
    connection = pika.BlockingConnection(params())
    channel = connection.channel()
    channel.queue_declare("headers", durable=True)
    channel.confirm_delivery()
    properties = pika.BasicProperties(headers={"padding": "h" * size})
    for _ in range(count):
        channel.basic_publish("", "headers", b"", properties)
    kept = channel.queue_declare("headers", passive=True).method.message_count
    say(kept=kept)
    connection.close()


def fill(size, count, asked, kind=0):
    """Publishes count messages of size bytes, confirmed, to a queue that asks for `asked`
    bytes of x-max-length-bytes (0: none), of type `kind` (0 classic, 1 quorum, 2 stream);
    what the broker refused and what it kept."""
    connection = pika.BlockingConnection(params())
    channel = connection.channel()
    arguments = {"x-queue-type": ["classic", "quorum", "stream"][kind]}
    if asked:
        arguments["x-max-length-bytes"] = asked
    channel.queue_declare("fill", durable=True, arguments=arguments)
    channel.confirm_delivery()
    refused = 0
    for _ in range(count):
        try:
            channel.basic_publish("", "fill", b"x" * size)
        except pika.exceptions.NackError:
            refused += 1
    # A stream answers no message count; the test reads the management API instead.
    kept = channel.queue_declare("fill", passive=True).method.message_count if kind < 2 else None
    say(refused=refused, kept=kept)
    connection.close()


def consume():
    """Consumes until the broker closes the connection; says so, and how."""
    connection = pika.BlockingConnection(params())
    channel = connection.channel()
    channel.queue_declare("work", durable=True)
    channel.basic_consume("work", lambda ch, method, props, body: None, auto_ack=True)
    say(consuming=True)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            connection.process_data_events(time_limit=1)
        say(closed=None)
    except Exception as e:
        say(closed=error(e))


if __name__ == "__main__":
    action, args = sys.argv[1], [int(a) for a in sys.argv[2:]]
    try:
        {
            "roundtrip": roundtrip,
            "channels": channels,
            "headers": headers,
            "connect": connect,
            "connections": connections,
            "queues": queues,
            "fill": fill,
            "consume": consume,
        }[action](*args)
    except Exception as e:
        say(error=error(e))
