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


@pytest.mark.parametrize("text,message", [
    ("[charging]\nfactor = -1\n", "line 2: charging.factor must be greater than 0, got -1"),
    ("[charging]\nfactor = 0\n", "line 2: charging.factor must be greater than 0, got 0"),
    ("[flags]\ngpu_idle_pct = 150\n", "line 2: flags.gpu_idle_pct must be from 0 to 100, got 150"),
    ("[flags]\ncpu_low_eff_pct = -5\n", "line 2: flags.cpu_low_eff_pct must be from 0 to 100, got -5"),
    ("[flags]\nmin_runtime_s = 60\ntime_oversized_pct = 100.5\n",
     "line 3: flags.time_oversized_pct must be from 0 to 100, got 100.5"),
    ("[flags]\nmem_headroom = 0.5\n", "line 2: flags.mem_headroom must be at least 1, got 0.5"),
    ("[flags]\ntime_headroom = 0\n", "line 2: flags.time_headroom must be at least 1, got 0"),
    ("[flags]\nmin_runtime_s = -300\n", "line 2: flags.min_runtime_s must not be negative, got -300"),
    ("[flags]\nfailed_burn_alarm_sbu = -1\n", "line 2: flags.failed_burn_alarm_sbu must not be negative, got -1"),
    ("[flags]\nrunning_gpu_idle_min = 0\n", "line 2: flags.running_gpu_idle_min must be greater than 0, got 0"),
    ("[samples]\nmax_gap_s = 0\n", "line 2: samples.max_gap_s must be greater than 0, got 0"),
    ("[budgets]\nproj-a = 100\nproj-b = -5\n", "line 3: budgets.proj-b must not be negative, got -5"),
    ('[budgets]\n"proj-a/alice" = -1\n', "budgets.'proj-a/alice' must not be negative, got -1"),
    ("[budget_options]\nwarn_pct = 0\n", "line 2: budget_options.warn_pct must be greater than 0, got 0"),
    ("[advice]\nmem_partition_node_gib = -224\n",
     "line 2: advice.mem_partition_node_gib must not be negative, got -224"),
    ("[watch]\nidle_hours = -2\n", "line 2: watch.idle_hours must be greater than 0, got -2"),
])
def test_numbers_out_of_range_are_refused_with_the_key(tmp_path, text, message):
    p = tmp_path / "jobsight.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert str(err.value) in (f"{p}, {message}", f"{p}: {message}")


def test_numbers_at_the_ends_of_their_ranges_load():
    cfg = parse_config({"charging": {"factor": 0.01}, "budgets": {"proj-a": 0},
                        "flags": {"gpu_idle_pct": 0, "gpu_low_util_pct": 100, "mem_headroom": 1, "time_headroom": 1,
                                  "min_runtime_s": 0, "failed_burn_alarm_sbu": 0, "running_gpu_idle_min": 0.5},
                        "samples": {"max_gap_s": 1}})
    assert (cfg.factor, cfg.budgets, cfg.flags["gpu_low_util_pct"], cfg.flags["mem_headroom"]) == (0.01, {"proj-a": 0}, 100, 1)


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
