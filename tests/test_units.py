import pytest

from jobsight.analytics.ingest import units


@pytest.mark.parametrize("text,seconds", [
    ("1-02:03:04", 93784), ("05:12.345", 312.345), ("01:00:00", 3600), ("00:42", 42),
    ("8-15:40:36", 8 * 86400 + 15 * 3600 + 40 * 60 + 36), ("2-00:00", 2 * 86400), ("90", 90),
])
def test_durations(text, seconds):
    assert units.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["UNLIMITED", "Partition_Limit", "Unknown", "None", ""])
def test_null_words(text):
    assert units.parse_duration(text) is None
    assert units.parse_mem(text) is None


@pytest.mark.parametrize("text", ["20H", "54J", "-5", "1:2:3:4", "00:61"])
def test_bad_durations_raise_with_reason(text):
    with pytest.raises(ValueError, match="duration"):
        units.parse_duration(text)


def test_memory_powers_of_1024():
    assert units.parse_mem("438.50M") == round(438.5 * 2**20)
    assert units.parse_mem("1567524K") == 1567524 * 1024
    assert units.parse_mem("2T") == 2 * 2**40
    assert units.parse_mem("1234") == 1234
    assert units.parse_mem("12", default_unit="K") == 12 * 1024


def test_reqmem_legacy_suffixes():
    assert units.parse_reqmem("4000Mc", ncpus=4, nnodes=1) == 4 * 4000 * 2**20
    assert units.parse_reqmem("16Gn", ncpus=8, nnodes=2) == 32 * 2**30
    assert units.parse_reqmem("16G", ncpus=8, nnodes=2) == 16 * 2**30
    assert units.parse_reqmem("30512", ncpus=1, nnodes=1) == 30512 * 2**20
    assert units.parse_reqmem("0n", ncpus=1, nnodes=1) is None


def test_tres_and_gpus():
    tres = units.parse_tres("billing=67,cpu=2,gres/gpu:a100=2,gres/gpu=2,mem=4G,node=1")
    assert tres["billing"] == "67" and tres["mem"] == "4G"
    assert units.tres_gpus(tres) == (2, "a100")
    assert units.tres_gpus(units.parse_tres("cpu=1,gres/gpu:volta=2")) == (2, "volta")
    assert units.tres_gpus(units.parse_tres("cpu=1,mem=1G")) == (None, None)


def test_states():
    assert units.parse_state("CANCELLED by 1234") == ("CANCELLED", 1234)
    assert units.parse_state("CANCELLED+") == ("CANCELLED", None)
    assert units.parse_state("OUT_OF_MEMORY") == ("OUT_OF_MEMORY", None)
    with pytest.raises(ValueError):
        units.parse_state("12:30")
