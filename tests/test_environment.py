"""The machine facts a run records about itself."""

from satbed.results.environment import CpuTimes


def _stat(tmp_path, name: str, line: str) -> str:
    path = tmp_path / name
    path.write_text(line + "\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    return str(path)


def test_cpu_steal_and_busy_shares_between_two_readings(tmp_path):
    # user nice system idle iowait irq softirq steal guest guest_nice
    before = CpuTimes.read(_stat(tmp_path, "a", "cpu  100 0 50 800 10 0 40 0 0 0"))
    after = CpuTimes.read(_stat(tmp_path, "b", "cpu  160 0 70 1000 10 0 50 100 0 0"))
    assert before == CpuTimes(busy=190, idle=810, steal=0)
    # 90 busy, 200 idle, 100 stolen ticks: 390 in all.
    assert after.since(before) == {"busy_fraction": round(90 / 390, 4), "steal_fraction": round(100 / 390, 4)}


def test_unreadable_or_foreign_stat_gives_nothing(tmp_path):
    assert CpuTimes.read(str(tmp_path / "missing")) is None
    assert CpuTimes.read(_stat(tmp_path, "short", "cpu 1 2 3")) is None
    same = CpuTimes(1, 2, 3)
    assert same.since(same) == {}


def test_this_machine_has_a_stat():
    assert CpuTimes.read() is not None
