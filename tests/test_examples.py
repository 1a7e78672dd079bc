"""The examples run end to end (at a small size)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_runs_and_reports_its_guarantee():
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py"), "--rows", "5000", "--draws", "100", "--tune", "100"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    spent = float(re.search(r"Privacy spent: epsilon = ([0-9.]+)", out).group(1))
    recorded = float(re.search(r"dp_epsilon = ([0-9.]+)", out).group(1))
    assert spent == recorded and 0 < spent <= 4.0
    assert "Groups in the DP result: ['posterior', 'sample_stats']" in out
    assert re.search(r"slopes\[age\]\s+-?[0-9.]+\s+[0-9.]+\s+-?[0-9.]+", out)
