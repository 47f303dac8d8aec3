"""A scrape of the Prometheus metrics (GET /edt/api/v1/metrics), read with prometheus_client's
own parser, as a test asks it: a sample's value summed over the labels not named, and the
names a PromQL query may use."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

#: The sample names a family of each type exposes beside its own name.
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created"),
    "info": ("_info",),
}


class Scrape:
    def __init__(self, text: str) -> None:
        self.families = list(text_string_to_metric_families(text))

    def value(self, sample: str, **labels: str) -> float:
        """The sum of the samples named `sample` whose labels include `labels` (0: none)."""
        return sum(
            s.value
            for family in self.families
            for s in family.samples
            if s.name == sample and labels.items() <= s.labels.items()
        )

    def labels(self, sample: str, label: str) -> set[str]:
        """The values `label` takes in the samples named `sample`."""
        return {
            s.labels[label]
            for family in self.families
            for s in family.samples
            if s.name == sample and label in s.labels
        }

    def exposed(self) -> set[str]:
        """Every name a query may use: each family's own, its type's sample names (a counter's
        `_total`, a histogram's `_bucket`...), and every sample's, even of a family that has
        no sample yet (a histogram nothing was observed into)."""
        names = set()
        for family in self.families:
            names.add(family.name)
            names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ()))
            names.update(s.name for s in family.samples)
        return names
