"""``@pytest.mark.config``: what a real test needs of the local cluster's configuration
(tests/integration/conftest.py deselects it elsewhere)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from integration.conftest import config_needs


class Item:
    nodeid = "tests/integration/test_x.py::test_y"

    def __init__(self, *marks: pytest.MarkDecorator) -> None:
        self.marks = [m.mark for m in marks]

    def iter_markers(self, name: str) -> Iterator[pytest.Mark]:
        return iter([m for m in self.marks if m.name == name])


def test_the_needs_are_the_keywords() -> None:
    item = Item(pytest.mark.config(cgroup=True, noenforce=False))
    assert config_needs(item) == {"cgroup": True, "noenforce": False}  # type: ignore[arg-type]
    assert config_needs(Item(pytest.mark.config())) == {}  # type: ignore[arg-type]
    assert config_needs(Item(pytest.mark.slurm)) == {}  # type: ignore[arg-type]


@pytest.mark.parametrize("mark", [
    pytest.mark.config("cgroup"),  # positional: ambiguous, refused
    pytest.mark.config(cgroups=True),  # not a feature
    pytest.mark.config(cgroup="yes"),  # not a bool
])
def test_a_wrong_marker_is_a_usage_error(mark: pytest.MarkDecorator) -> None:
    with pytest.raises(pytest.UsageError, match=r"test_x\.py::test_y"):
        config_needs(Item(mark))  # type: ignore[arg-type]
