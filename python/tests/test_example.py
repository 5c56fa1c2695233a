"""examples/factor_research.py runs end to end (small panel) and saves its figure."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "factor_research.py")


def test_factor_research_example(tmp_path):
    png = tmp_path / "ic.png"
    r = subprocess.run([sys.executable, EXAMPLE, "--days", "300", "--stocks", "60", "--out", str(png)],
                       capture_output=True, text=True, env={**os.environ, "MPLBACKEND": "Agg"}, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "reversal_5d" in r.stdout and "mean IC" in r.stdout
    assert png.stat().st_size > 10000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
