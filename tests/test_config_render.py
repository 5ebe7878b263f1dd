import pytest

from jobsight.analytics import render
from jobsight.analytics.config import DEFAULT_FLAGS, ConfigError, load_config, parse_config


def test_defaults_without_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JOBSIGHT_CONFIG", raising=False)
    cfg = load_config()
    assert cfg.path is None and cfg.policy == "slurm-billing"
    assert cfg.flags["gpu_low_util_pct"] == 25 and cfg.flags["min_runtime_s"] == 300


def test_file_found_in_working_directory_and_env(tmp_path, monkeypatch):
    (tmp_path / "jobsight.toml").write_text('[flags]\ncpu_low_eff_pct = 50\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JOBSIGHT_CONFIG", raising=False)
    assert load_config().flags["cpu_low_eff_pct"] == 50
    other = tmp_path / "other.toml"
    other.write_text('[charging]\npolicy = "table"\npreset = "snellius"\n')
    monkeypatch.setenv("JOBSIGHT_CONFIG", str(other))
    cfg = load_config()
    assert cfg.policy == "table" and {r["partition"] for r in cfg.rates} >= {"rome", "gpu_a100", "gpu_h100"}


@pytest.mark.parametrize("text,message", [
    ('[flags]\ngpu_low_util = 20\n', "unknown key flags.gpu_low_util"),
    ('[flags]\ngpu_low_util_pct = "high"\n', "must be a number"),
    ('[charging]\npolicy = "free"\n', "charging.policy must be one of"),
    ('[charging]\npreset = "lumi"\n', "unknown charging.preset"),
    ('[[charging.rates]]\nper_core_h = 1\n', "needs a partition"),
    ('[colours]\nx = 1\n', "unknown section"),
    ('[flags\n', "not valid TOML"),
    ('[[charging.rates]]\npartition = "gpu"\ncores_per_gpu = 0\n', r"charging.rates\[0\].cores_per_gpu must be greater than 0"),
    ('[[charging.rates]]\npartition = "rome"\nmem_per_core_gb = -1.75\n', "mem_per_core_gb must be greater than 0"),
    ('[[charging.rates]]\npartition = "rome"\nper_core_h = -1\n', "per_core_h must not be negative"),
])
def test_bad_config_names_file_and_key(tmp_path, text, message):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=message) as err:
        load_config(p)
    assert str(p) in str(err.value)


def test_rate_overrides_preset_partition():
    cfg = parse_config({"charging": {"policy": "table", "preset": "snellius",
                                     "rates": [{"partition": "rome", "per_core_h": 2.0}]}})
    rome = [r for r in cfg.rates if r["partition"] == "rome"]
    assert rome == [{"partition": "rome", "per_core_h": 2.0}]


def test_settings_cover_every_flag_default():
    names = {n for n, _v, _t in parse_config({}).settings()}
    assert {f"flags.{k}" for k in DEFAULT_FLAGS} <= names and "charging.policy" in names


def test_terminal_and_csv_neutralisation():
    assert render.terminal_safe("job\x1b[31mred\nx") == "job\\x1b[31mred\\nx"
    csv_text = render.to_csv([{"a": "=HYPERLINK(1)", "b": "-2+3", "c": 5, "d": "ok"}], ["a", "b", "c", "d"])
    assert csv_text.splitlines()[1] == "'=HYPERLINK(1),'-2+3,5,ok"


def test_sparkline_scales_0_to_100():
    assert render.sparkline([0, 100]) == "▁█"
    assert render.sparkline([None, 50]) == " ▅"
