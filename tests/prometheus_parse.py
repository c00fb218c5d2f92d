"""Parses OpenMetrics text from stdin with the Prometheus Python client's own (strict)
OpenMetrics parser and prints every sample as JSON; exits non-zero if the text does not
parse (a missing `# EOF`, a malformed label, a counter without `_total`)."""
import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families

samples = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for sample in family.samples:
        samples.append({"name": sample.name, "labels": sample.labels, "value": sample.value})
json.dump(samples, sys.stdout)
