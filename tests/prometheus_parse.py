"""Parses Prometheus text exposition from stdin with the Prometheus client's own parser
and prints every sample as JSON; exits non-zero if the text does not parse."""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

samples = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for sample in family.samples:
        samples.append({"name": sample.name, "labels": sample.labels, "value": sample.value})
json.dump(samples, sys.stdout)
