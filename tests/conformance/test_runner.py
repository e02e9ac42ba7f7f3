"""The conformance runner's own logic on a tiny fake script folder: verdicts, test-case lines, deselected
cases, unclassified scripts and the summary line; and a suite whose server must fail to start, with a
real ``naiad serve``.  No NVIDIA checkout is involved."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from conformance.runner import (
    Ports,
    Script,
    Skip,
    Suite,
    Verdict,
    run_script,
    run_suite,
    summary,
    unclassified,
)
from tests.support.models import IDENTITY_PY, identity_config, write_model

PORTS = Ports(8000, 8001, 8002)

FAKE_TESTS = """
import unittest


class FakeTest(unittest.TestCase):
    def test_passes(self):
        self.assertEqual(1, 1)

    def test_fails(self):
        self.assertEqual(1, 2, "one is not two")

    def test_deselected(self):
        raise SystemExit("must not run")
"""


def _script(folder: Path, name: str, body: str, **kwargs: object) -> Script:
    (folder / name).write_text(body)
    return Script(name, ("{python}", name, "{http}"), folder, **kwargs)  # type: ignore[arg-type]


def test_scripts_pass_on_exit_zero_and_the_expected_output_only(tmp_path: Path) -> None:
    log = io.StringIO()
    ok = _script(tmp_path, "ok.py", "import sys; print('PASS', sys.argv[1])", expect=r"PASS localhost:8000")
    failing = _script(tmp_path, "failing.py", "import sys; print('boom'); sys.exit(3)")
    silent = _script(tmp_path, "silent.py", "print('nothing to see')", expect="PASS")
    verdicts = [v for s in (ok, failing, silent) for v in run_script(s, PORTS, log)]
    assert [(v.name, v.outcome) for v in verdicts] == [
        ("ok.py", "PASS"),
        ("failing.py", "FAIL"),
        ("silent.py", "FAIL"),
    ]
    assert verdicts[1].detail == "exit 3: boom"
    assert verdicts[2].detail.startswith("output lacks /PASS/")
    assert "===== failing.py" in log.getvalue()


def test_scripts_that_need_the_default_ports_are_skipped_elsewhere(tmp_path: Path) -> None:
    fixed = _script(tmp_path, "fixed.py", "pass", fixed_ports=True)
    (verdict,) = run_script(fixed, Ports(18000, 18001, 18002), io.StringIO())
    assert verdict.outcome == "SKIP"


@pytest.mark.parametrize("per_case", [False, True])
def test_test_files_get_a_line_per_case_and_deselected_cases_are_skipped_with_the_reason(
    tmp_path: Path, per_case: bool
) -> None:
    """Whether the file runs in one pytest process or in one per case, the verdicts are the same."""
    (tmp_path / "fake_test.py").write_text(FAKE_TESTS)
    script = Script(
        "qa/fake_test.py", ("fake_test.py",), tmp_path, pytest=True,
        deselect={"FakeTest::test_deselected": "needs a GPU"}, per_case=per_case,
    )  # fmt: skip
    verdicts = {v.name: v for v in run_script(script, PORTS, io.StringIO())}
    assert {name: v.outcome for name, v in verdicts.items()} == {
        "qa/fake_test.py::FakeTest::test_passes": "PASS",
        "qa/fake_test.py::FakeTest::test_fails": "FAIL",
        "qa/fake_test.py::FakeTest::test_deselected": "SKIP",
    }
    assert "one is not two" in verdicts["qa/fake_test.py::FakeTest::test_fails"].detail
    assert verdicts["qa/fake_test.py::FakeTest::test_deselected"].detail == "needs a GPU"


def test_unclassified_scripts_are_reported_and_the_summary_counts_every_outcome(tmp_path: Path) -> None:
    for name in ("known.py", "skipped.py", "new_upstream.py"):
        (tmp_path / name).write_text("")
    found = unclassified(tmp_path, "*.py", {"client/known.py", "client/skipped.py"}, "client/")
    assert found == [Skip("client/new_upstream.py", "not classified by conformance/cases.py yet")]
    verdicts = [Verdict("a", "PASS"), Verdict("b", "FAIL"), Verdict("c", "SKIP"), Verdict("d", "PASS")]
    assert summary(verdicts) == "2 passed, 1 failed, 1 skipped"


@pytest.mark.parametrize("broken", [True, False], ids=["fails", "starts"])
def test_a_suite_whose_server_must_fail_to_start_reads_its_log(tmp_path: Path, broken: bool) -> None:
    """A real ``naiad serve``: when it exits as it must, the suite's scripts read what it logged; when
    it starts instead, each of them fails with the reason."""
    delay = "-5" if broken else "5"

    def build(repo: Path) -> None:
        write_model(repo, "identity", identity_config("identity", "TYPE_FP32", 8) + f"dynamic_batching {{ max_queue_delay_microseconds: {delay} }}\n", IDENTITY_PY)

    link = tmp_path / "server.log"
    checks = tuple(
        Script(f"grep {text}", ("grep", "-qF", text, link.name), tmp_path)
        for text in ("Expected integer, got: -", "not in the log")
    )
    suite = Suite("must-fail", build, checks, log_link=link, fails_to_start=True)
    out = io.StringIO()
    verdicts = run_suite(suite, tmp_path / "work", out, io.StringIO())
    if broken:
        assert [(v.name, v.outcome) for v in verdicts] == [
            ("grep Expected integer, got: -", "PASS"),
            ("grep not in the log", "FAIL"),
        ]
    else:
        assert [(v.outcome, v.detail) for v in verdicts] == [
            ("FAIL", "unexpected success starting naiad serve (exit None)")
        ] * 2
    assert out.getvalue().count("\n") == 2


def test_a_suite_server_runs_in_its_folder_with_its_errors_apart(tmp_path: Path) -> None:
    """``server_cwd``: flags naming files relative to the test's folder land there; ``error_log_link``:
    the server's standard error is kept apart from its output (a test.sh's ``SERVER_ERROR_LOG``)."""
    folder = tmp_path / "qa"
    folder.mkdir()

    def build(repo: Path) -> None:
        write_model(repo, "identity", identity_config("identity", "TYPE_FP32", 8), IDENTITY_PY)
        (repo / "identity" / "01").mkdir()  # not a version: a warning

    def grep(pattern: str, file: str, absent: bool = False) -> Script:
        command = f"{'! ' if absent else ''}grep -q \"{pattern}\" {file}"
        return Script(f"{file}: {'no ' if absent else ''}{pattern}", ("bash", "-c", command), folder)

    in_file = Suite("file", build, (grep("^W.*'01'", "relative.log"),), ("--log-file=relative.log",), server_cwd=folder)
    apart = Suite(
        "apart",
        build,
        (grep("^W.*'01'", "err.log"), grep("^W", "out.log", absent=True), grep("^I.*Started HTTPService", "out.log")),
        log_link=folder / "out.log",
        error_log_link=folder / "err.log",
    )
    verdicts = [v for suite in (in_file, apart) for v in run_suite(suite, tmp_path / "work", io.StringIO(), io.StringIO())]
    assert [v.outcome for v in verdicts] == ["PASS"] * 4, verdicts
