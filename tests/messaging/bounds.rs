//! The bounds create sets hold against the preview's own app: connections, queues, and
//! the bytes a queue holds, whatever the app declares.

use crate::{
    MAX_CHANNELS, MAX_CONNECTIONS, MAX_QUEUE_BYTES, MAX_QUEUE_MESSAGES, MAX_QUEUES, Preview,
};

#[test]
fn a_connection_past_the_bound_is_refused() {
    let preview = Preview::of("octo/bounded-connections#1");
    preview.create();
    let app = preview.amqp("connections", &[MAX_CONNECTIONS + 1]);
    assert_eq!(app["opened"], MAX_CONNECTIONS, "{app}");
    let error = app["error"].as_str().unwrap_or_default();
    assert!(error.contains("connection limit"), "{app}");
}

/// Each channel costs the broker memory; the connection limit alone leaves 2047 a
/// connection.
#[test]
fn a_channel_past_the_bound_is_refused() {
    let preview = Preview::of("octo/bounded-channels#1");
    preview.create();
    let app = preview.amqp("channels", &[MAX_CHANNELS + 1]);
    assert_eq!(app["opened"], MAX_CHANNELS, "{app}");
    let error = app["error"].as_str().unwrap_or_default();
    assert!(error.contains("channel"), "{app}");
}

/// max-length-bytes counts bodies only: messages with empty bodies and large headers
/// would fill the disk under it. The count bounds them.
#[test]
fn messages_of_headers_alone_cannot_grow_a_queue_past_the_count() {
    let preview = Preview::of("octo/bounded-headers#1");
    preview.create();
    let app = preview.amqp("headers", &[MAX_QUEUE_MESSAGES * 3, 50_000]);
    let kept = app["kept"].as_u64().unwrap_or_else(|| panic!("{app}"));
    assert_eq!(kept, u64::from(MAX_QUEUE_MESSAGES), "{app}");
}

#[test]
fn a_queue_past_the_bound_is_refused() {
    let preview = Preview::of("octo/bounded-queues#1");
    preview.create();
    let app = preview.amqp("queues", &[MAX_QUEUES + 1]);
    assert_eq!(app["declared"], MAX_QUEUES, "{app}");
    let error = app["error"].as_str().unwrap_or_default();
    assert!(error.contains("queue limit"), "{app}");
}

#[test]
fn a_queue_cannot_grow_past_the_byte_bound_even_when_it_asks_for_more() {
    fills_no_further_than_the_bound("octo/bounded-bytes#1", 0);
}

#[test]
fn a_quorum_queue_cannot_grow_past_the_byte_bound_either() {
    fills_no_further_than_the_bound("octo/bounded-quorum-bytes#1", 1);
}

/// Known limit: a stream takes max-length-bytes as retention, which RabbitMQ applies by
/// whole segments (500 MB by default), so a stream the app declares outgrows the bound.
/// Operator policies on 3.10 cannot set the segment size. The bound on disk is then the
/// broker's own (`disk_free_limit`), and MAX_QUEUES streams of a segment each.
#[test]
#[ignore = "known limit: streams apply the byte bound by whole segments"]
fn a_stream_cannot_grow_past_the_byte_bound() {
    fills_no_further_than_the_bound("octo/bounded-stream-bytes#1", 2);
}

/// 30 messages of 1000 bytes into a queue of `kind` (amqp.py's fill) that asks for a
/// hundred times the bound: at most the bound's worth is kept.
fn fills_no_further_than_the_bound(key: &str, kind: u32) {
    let preview = Preview::of(key);
    preview.create();
    let size = 1_000;
    // The app's own x-max-length-bytes, a hundred times the bound, does not raise it.
    let app = preview.amqp("fill", &[size, 30, MAX_QUEUE_BYTES * 100, kind]);
    let (refused, kept) = (app["refused"].as_u64(), app["kept"].as_u64());
    if kind < 2 {
        let kept = kept.unwrap_or_else(|| panic!("{app}"));
        assert!(
            kept * u64::from(size) <= u64::from(MAX_QUEUE_BYTES),
            "{kept} messages of {size} bytes kept: {app}"
        );
        assert!(kept > 0, "{app}");
    }
    // Refused (where the broker takes overflow in an operator policy) or dropped from the
    // head (3.10): 30 sent, at most 10 kept either way.
    assert!(refused.is_some(), "{app}");
    // The management API's view of the queue, once its statistics are in (the broker
    // here collects them every 500 ms).
    let broker = preview.broker();
    let path = format!("/api/queues/{}/fill", preview.slug);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut queue = broker.get(&path);
    while (queue["operator_policy"].is_null() || queue["messages"].is_null())
        && std::time::Instant::now() < until
    {
        std::thread::sleep(std::time::Duration::from_millis(200));
        queue = broker.get(&path);
    }
    assert_eq!(queue["operator_policy"], "previewd-bounds", "{queue}");
    assert_eq!(
        queue["effective_policy_definition"]["max-length-bytes"], MAX_QUEUE_BYTES,
        "{queue}"
    );
    // A stream reports no message_bytes; its messages count, all of size bytes.
    let bytes = queue["message_bytes"]
        .as_u64()
        .unwrap_or_else(|| queue["messages"].as_u64().unwrap_or(u64::MAX) * u64::from(size));
    assert!(bytes <= u64::from(MAX_QUEUE_BYTES), "{queue}");
}
