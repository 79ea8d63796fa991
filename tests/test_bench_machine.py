"""bench/machine.py: a ratio counts only when the cores were idle when the bench started."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import machine  # noqa: E402  (bench/machine.py: the scripts import it by this name)


def test_a_ratio_on_busy_cores_is_not_a_measurement():
    idle = machine.Machine("2-core Test CPU", 2, load=0.4, busy=0.9)
    assert idle.idle and idle.ratio("faiss / ours", 1.234) == \
        "faiss / ours: 1.23x (2-core Test CPU, idle)"
    for load, busy in ((1.2, 0.0), (0.1, 1.5)):  # either the load average or the busy cores
        m = machine.Machine("2-core Test CPU", 2, load=load, busy=busy)
        assert not m.idle
        assert m.ratio("faiss / ours", 1.234).startswith("faiss / ours: busy (1.23x")
        assert "BUSY" in m.line()
    nan = machine.Machine("x", 4, load=1.0, busy=float("nan"))  # no /proc/stat: the load decides
    assert nan.idle


def test_the_machine_now_names_the_cpu():
    m = machine.Machine.now(seconds=0.1)
    assert m.cores >= 1 and "core" in m.cpu and m.load >= 0
