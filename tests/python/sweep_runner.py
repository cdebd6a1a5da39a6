"""Shared by the fault tests (check_faults.py, check_interrupt.py): start a sweep and wait until the
report on disk (rewritten after every job) holds a finished job."""
import json
import sys
import subprocess
import time
from pathlib import Path


def start_and_wait_for_a_job(cmd, report, limit_s=300):
    """Runs cmd + ['--out', report]; returns (process, jobs seen in the report). The process has
    ended when proc.poll() is not None; seen is 0 when no job appeared within limit_s."""
    report = Path(report)
    report.unlink(missing_ok=True)
    proc = subprocess.Popen(list(cmd) + ["--out", str(report)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen, deadline = 0, time.time() + limit_s
    while time.time() < deadline and proc.poll() is None:
        try:
            seen = len(json.loads(report.read_text())["results"])
        except (OSError, ValueError, KeyError):
            seen = 0
        if seen >= 1:
            break
        time.sleep(0.05)
    return proc, seen


def check_kept_report(report, seen, problems):
    """The report a stopped or killed sweep leaves: valid (validate_report.py), not complete, and
    holding at least the `seen` jobs finished before the fault as ok results. Appends what is
    wrong to `problems`; returns the parsed report or None."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import validate_report  # noqa: E402  (scripts/)
    try:
        rep = validate_report.load_report(str(report))
    except validate_report.ReportError as e:
        problems.append(f"report invalid: {e}")
        return None
    ok = [r for r in rep["results"] if r["status"] == "ok"]
    if len(ok) < seen:
        problems.append(f"{len(ok)} ok results kept, {seen} were finished before the fault")
    if rep["complete"]:
        problems.append("the report says complete")
    return rep
