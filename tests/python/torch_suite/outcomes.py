"""Outcomes of the harness's tests: runs one test case and condenses what happened into a
record {name, outcome, seconds, reason}, outcome one of passed, failed, skipped and
expected_skip; reason is the one-line cause of a failure (each failing rank's exception)
or the reason of a skip (read from rank 0's log when the ranks skipped by themselves)."""

import contextlib
import io
import os
import re
import signal
import time
import unittest

OUTCOME_TAGS = {"passed": "PASS ", "failed": "FAIL ", "skipped": "SKIP ",
                "expected_skip": "XSKIP"}
MAX_REASON = 300
_RANK_BLOCK = re.compile(r"Process (\d+) exited with error code \d+ and exception:\n"
                         r"(.*?)(?=\nProcess \d+ exited with error code|\Z)", re.S)
_EXIT_CODE = re.compile(r"Expected exit code \d+ but got (-?\d+)")
_SKIP_LOGGED = re.compile(r"skipping test \S+ for following reason: (.*)")


_FRAME = re.compile(r'  File ".*/(distributed_test\.py)", line (\d+), in (\w+)')


def exception_line(text):
    """The last exception of a formatted traceback in one line: "Type: message" (its
    first two lines) and where the suite raised it, "[distributed_test.py:N: code]"."""
    lines = text.rstrip().splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent")]
    first = starts[-1] + 1 if starts else 0
    where = ""
    for i in range(first, len(lines)):
        ln = lines[i]
        frame = _FRAME.match(ln)
        if frame and i + 1 < len(lines):
            where = f" [{frame[1]}:{frame[2]}: {lines[i + 1].strip()}]"
        if ln and not ln[0].isspace():
            message = []
            for m in lines[i:]:
                if m.startswith("To execute this test") or len(message) == 2:
                    break  # torch's hint on rerunning the test follows the message
                if m.strip():
                    message.append(m.strip())
            return " ".join(message) + where
    return lines[-1].strip() if lines else ""


def failure_cause(text):
    """One line: each failing rank's exception (ranks that agree are named together),
    else the harness's own exception (a timeout, an unexpected exit code)."""
    by_message = {}
    for rank, block in _RANK_BLOCK.findall(text):
        by_message.setdefault(exception_line(block), []).append(rank)
    if not by_message:
        code = _EXIT_CODE.search(text)  # rank 0 died, or exited as no test of it should
        if code and int(code[1]) < 0:
            return f"rank 0 killed by {signal.Signals(-int(code[1])).name}"
        if code:
            return f"rank 0 exited with code {code[1]}"
        return exception_line(text)[:MAX_REASON]
    parts = [f"rank {','.join(ranks)}: {msg}" for msg, ranks in by_message.items()]
    return " | ".join(p[:MAX_REASON] for p in parts)


def logged_skip_reason(logs, name, default):
    path = os.path.join(logs, f"{name}.rank0.log")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            found = _SKIP_LOGGED.findall(f.read())
    except OSError:
        return default
    return found[-1].strip() if found else default


def run_one(test, logs):
    """Runs a TorchSuite test case; its record."""
    import suite

    result = unittest.TestResult()
    start = time.monotonic()
    printed = io.StringIO()  # MultiProcessTestCase prints why it ended a test's ranks
    with contextlib.redirect_stdout(printed):
        test.run(result)
    if printed.getvalue():
        with open(os.path.join(logs, f"{test._testMethodName}.main.log"), "a") as f:
            f.write(printed.getvalue())
    record = {"name": test._testMethodName, "seconds": round(time.monotonic() - start, 1)}
    if result.failures or result.errors:
        text = (result.errors + result.failures)[0][1]
        record.update(outcome="failed", reason=failure_cause(text))
    elif result.skipped:
        reason = result.skipped[0][1]
        if reason.startswith(suite.EXPECTED_SKIP_PREFIX):
            record.update(outcome="expected_skip", reason=reason)
        else:
            reason = logged_skip_reason(logs, record["name"], reason)
            record.update(outcome="skipped", reason=reason)
    else:
        record.update(outcome="passed", reason="")
    return record


def line(record):
    tag = OUTCOME_TAGS[record["outcome"]]
    text = f"{tag} {record['name']} ({record['seconds']:.1f} s)"
    return f"{text}  {record['reason']}" if record["reason"] else text


def summary(records, label, seconds):
    counts = {o: sum(r["outcome"] == o for r in records) for o in OUTCOME_TAGS}
    return (f"torch_suite {label}: {counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['skipped'] + counts['expected_skip']} skipped "
            f"({counts['expected_skip']} expected) in {seconds:.0f} s")
