import pytest

from slurm_fsm.duration import Duration, DurationKind


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30 * 60),
        ("05:30", 5 * 60 + 30),
        ("04:00:00", 4 * 3600),
        ("1-02:03:04", 86400 + 2 * 3600 + 3 * 60 + 4),
        ("2-12", 2 * 86400 + 12 * 3600),
        ("1-00:30", 86400 + 30 * 60),
        ("0:00", 0),
        ("  10:00 ", 600),
    ],
)
def test_finite_forms(text: str, seconds: int) -> None:
    d = Duration.parse(text)
    assert d.kind is DurationKind.FINITE
    assert d.seconds == seconds


@pytest.mark.parametrize(
    ("text", "kind"),
    [("UNLIMITED", DurationKind.UNLIMITED), ("INFINITE", DurationKind.UNLIMITED),
     ("NOT_SET", DurationKind.NOT_SET), ("INVALID", DurationKind.INVALID)],
)
def test_keywords(text: str, kind: DurationKind) -> None:
    d = Duration.parse(text)
    assert d.kind is kind
    assert d.seconds is None
    assert not d.is_finite


@pytest.mark.parametrize("text", ["", "abc", "1:2:3:4", "10:75:00", "1-25:61", "-5", "5m"])
def test_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a Slurm duration"):
        Duration.parse(text)


def test_round_trip_formatting() -> None:
    assert Duration.parse("1-02:03:04").as_slurm() == "1-02:03:04"
    assert str(Duration.parse("90")) == "01:30:00"
    assert str(Duration.parse("UNLIMITED")) == "UNLIMITED"
    assert Duration.of_seconds(59).as_slurm() == "00:00:59"
    with pytest.raises(ValueError):
        Duration.of_seconds(-1)
