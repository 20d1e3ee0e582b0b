"""scripts/mutation.sh (cosmic-ray): it tells a killed mutant from a surviving one, and says so.

One run of the script with two targets holding the same single mutant of a small function,
``trust._median_of_others``: against the test that checks it (the mutant is killed) and against
a test that never calls it (it survives, the script prints its diff and exits 1). cosmic-ray is not in the [test] extra: the script
installs it on first use; without it here the test is skipped with that fix.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
FUNCTION = "flwr_adaptive/strategies/trust.py::_median_of_others"


def test_the_script_tells_a_killed_mutant_from_a_surviving_one_and_shows_the_survivor():
    pytest.importorskip("cosmic_ray", reason="run scripts/mutation.sh once: it installs cosmic-ray into .venv")
    # Prepare: the same mutant (seeded sample of one) of _median_of_others twice: "caught" runs the
    # property test that checks the function, "missed" runs a solver test that never calls it
    caught = f"caught={FUNCTION};tests/test_liar.py -k median_of_others_is_the_median"
    missed = f"missed={FUNCTION};tests/test_solver.py -k hand_computed"
    cmd = [sys.executable, str(REPO / "scripts" / "mutation.py"), "--only", caught, "--only", missed,
           "--sample", "1", "--seed", "0"]
    # Execute
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    out = proc.stdout
    # Assert: one row each, killed (100 %) and survived (0 %), exit 1 for the survivor, whose
    # change is printed as a diff of that file
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-3000:]
    assert re.search(r"^\| caught \| flwr_adaptive/strategies/trust.py \| 1 / \d+ \| 1 \| 0 \| 0 \| 100% \|$", out, re.M), out
    assert re.search(r"^\| missed \| flwr_adaptive/strategies/trust.py \| 1 / \d+ \| 0 \| 1 \| 0 \| 0% \|$", out, re.M), out
    assert "-- SURVIVED flwr_adaptive/strategies/trust.py:" in out
    assert re.search(r"^[-+] ", out, re.M)  # the diff's changed lines
