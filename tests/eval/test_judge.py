"""The judge's reading of a JUnit report: ids mapped as pytest's junitxml maps them, every id
passed by name or not resolved."""

from __future__ import annotations

import pytest
from _pytest.junitxml import mangle_test_address

from synthorg.eval.judge import junit_address, pytest_args, verdict

IDS = [
    "tests/test_a.py::TestX::test_one",
    "tests/sub/test_b.py::test_two[1-x::y]",
    "test_c.py::test_three",
]


@pytest.mark.parametrize("test_id", IDS)
def test_ids_map_as_pytest_junitxml_maps_them(test_id: str) -> None:
    names = mangle_test_address(test_id)
    assert junit_address(test_id) == (".".join(names[:-1]), names[-1])


def _report(*cases: str) -> bytes:
    return f"<testsuites><testsuite>{''.join(cases)}</testsuite></testsuites>".encode()


def test_every_id_must_pass_by_name() -> None:
    ok = "<testcase classname='test_c' name='test_three'/>"
    failed = "<testcase classname='tests.test_a.TestX' name='test_one'><failure/></testcase>"
    torn = "<testcase classname='tests.test_a.TestX' name='test_one'><error/></testcase>"
    skipped = "<testcase classname='test_c' name='test_three'><skipped/></testcase>"
    assert verdict(_report(ok), ["test_c.py::test_three"]).resolved
    both = verdict(_report(ok, failed), ["test_c.py::test_three", IDS[0]])
    assert not both.resolved and both.failed == (IDS[0],)
    teardown = verdict(
        _report("<testcase classname='tests.test_a.TestX' name='test_one'/>", torn), [IDS[0]]
    )
    assert teardown.failed == (IDS[0],)  # a teardown error after a pass is a failure
    assert not verdict(_report(skipped), ["test_c.py::test_three"]).resolved
    unrun = verdict(_report(ok), ["test_c.py::test_three", "test_c.py::test_gone"])
    assert unrun.missing == ("test_c.py::test_gone",) and not unrun.resolved


def test_no_report_or_a_broken_one_resolves_nothing() -> None:
    for data in (None, b"", b"<not xml", b"x" * (33 * 1024 * 1024)):
        found = verdict(data, IDS)
        assert not found.resolved and found.missing == tuple(IDS)
    many = verdict(None, [f"t.py::test_{i}" for i in range(300)])
    assert many.summary().endswith("t.py::test_19 and 280 more")


def test_a_test_command_hint_keeps_options_and_never_the_runner() -> None:
    assert pytest_args("python -m pytest -p no:warnings -o pythonpath=src") == [
        "-p",
        "no:warnings",
        "-o",
        "pythonpath=src",
    ]
    assert pytest_args(None) == []
    with pytest.raises(ValueError, match="the judge runs pytest itself"):
        pytest_args("./runtests.py --parallel 1")
