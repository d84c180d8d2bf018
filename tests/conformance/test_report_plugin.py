"""The pytest plugin, on a toy spec: marks checked at collection, outcomes, options, the report.

Each test runs pytest in-process on files written by ``pytester``; the plugin comes in through
its ``pytest11`` entry point, as in any run of this environment, and acts only in a run that opts
in. (``test_quiet_install.py`` checks the same of the installed wheel, in other projects.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from diagnosis_harness.conformance.suite._support import RUN_CONTEXT

from ._support import OTHERS, THINGS, read_json, scenarios

if TYPE_CHECKING:
    from pathlib import Path

pytest_plugins = ["pytester"]

REAL_SCENARIO = "Invalid identity starts a Run"
SWITCH = ("-o", "diagnosis_harness_conformance=true")  # the ini switch, from the command line


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--strict-markers", *args)


def test_inert_unless_the_run_opts_in(pytester: pytest.Pytester) -> None:
    # Someone else's project: a `spec` marker of its own, used as the plugin's never would be.
    pytester.makeini("[pytest]\nmarkers =\n    spec(name): our own spec marker\n")
    # Not even a broken spec where the default would be looked for is read.
    broken = pytester.path / "specs" / "broken" / "spec.md"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"\xff\xfe not a spec")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.spec("x")
        def test_their_own_spec_mark():
            pass

        def test_plain():
            pass

        @pytest.mark.parametrize("n", [1, 2])
        def test_parametrized(n):
            assert n
        """
    )
    result = run(pytester)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=4)
    assert "spec conformance" not in result.stdout.str()
    assert not list(pytester.path.rglob("conformance.*"))
    markers = run(pytester, "--markers").stdout.str()
    assert "@pytest.mark.spec(name): our own spec marker" in markers
    assert "spec(requirement, scenario)" not in markers
    assert "model_check" not in markers
    assert "transition_coverage" not in run(pytester, "--fixtures").stdout.str()

    # The same project, opted in: its marks are read as ours (against the shipped spec once the
    # broken one is gone), and name no scenario.
    broken.unlink()
    result = run(pytester, *SWITCH)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*::test_their_own_spec_mark: unknown @pytest.mark.spec"])


@pytest.mark.parametrize(
    "opt_in",
    [
        pytest.param(SWITCH, id="switch"),
        pytest.param(("--spec", "specs/toy/spec.md"), id="spec"),
        pytest.param(("--spec-report", "out"), id="spec-report"),
        pytest.param(("--spec-strict",), id="spec-strict"),
        pytest.param(("--spec-unknown=report",), id="spec-unknown"),
        pytest.param((), id="spec_files-ini"),
    ],
)
def test_each_way_to_opt_in_registers_the_markers_and_the_fixture(
    pytester: pytest.Pytester, small_spec: Path, opt_in: tuple[str, ...]
) -> None:
    if not opt_in:
        pytester.makeini("[pytest]\nspec_files = specs/toy/spec.md\n")
    result = run(pytester, *opt_in, "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.spec(requirement, scenario):*", "*model_check:*"])
    run(pytester, *opt_in, "--fixtures").stdout.fnmatch_lines(["transition_coverage*"])


def test_spec_unknown_in_an_ini_file_alone_does_not_opt_in(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nspec_unknown = report\n")
    assert "spec(requirement, scenario)" not in run(pytester, "--markers").stdout.str()


def test_an_unknown_mark_fails_the_collection_with_the_nearest_name(
    pytester: pytest.Pytester, small_spec: Path
) -> None:
    pytester.makepyfile(
        test_things=f"""
        import pytest

        @pytest.mark.spec({THINGS!r}, "Frist thing")
        def test_first():
            pass

        @pytest.mark.spec({THINGS!r}, "Second thing")
        def test_second():
            pass
        """
    )
    result = run(pytester, "--spec", str(small_spec))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*test_things.py::test_first: unknown @pytest.mark.spec",
            f"*@pytest.mark.spec('{THINGS}', 'Frist thing') names no scenario of *spec.md",
            f'*did you mean @pytest.mark.spec("{THINGS}", "First thing")?',
            "*1 error during collection*",
        ]
    )
    assert "test_second: unknown" not in result.stdout.str()
    result.assert_outcomes(errors=1)


def test_a_malformed_mark_fails_the_collection(pytester: pytest.Pytester, small_spec: Path) -> None:
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.spec({THINGS!r})
        def test_one_name():
            pass

        @pytest.mark.spec(1, 2)
        def test_not_strings():
            pass

        @pytest.mark.spec(requirement={THINGS!r}, scenario="First thing", extra=1)
        def test_extra_keyword():
            pass

        @pytest.mark.spec(requirement={THINGS!r}, scenario="First thing")
        def test_keywords_are_fine():
            pass
        """
    )
    result = run(pytester, "--spec", str(small_spec))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines_random(
        [
            "*::test_one_name: unknown @pytest.mark.spec",
            "*takes two strings: @pytest.mark.spec(requirement, scenario); got 1 value(s)",
            "*takes two strings*; got int and int",
            "*takes two strings*; unexpected keyword(s) extra",
            "*3 errors during collection*",
        ]
    )
    assert "test_keywords_are_fine: unknown" not in result.stdout.str()


def test_outcomes_are_collected_into_the_report(
    pytester: pytest.Pytester, small_spec: Path
) -> None:
    pytester.makepyfile(
        test_outcomes=f"""
        import pytest

        @pytest.fixture
        def broken():
            raise RuntimeError("setup fails")

        @pytest.mark.spec({THINGS!r}, "First thing")
        def test_passes():
            pass

        @pytest.mark.spec({THINGS!r}, "Second thing")
        def test_fails():
            assert False

        @pytest.mark.spec({THINGS!r}, "Third thing")
        def test_skips():
            pytest.skip("not today")

        @pytest.mark.xfail(reason="known")
        @pytest.mark.spec({OTHERS!r}, "Fourth thing")
        def test_xfails():
            assert False

        @pytest.mark.spec({OTHERS!r}, "Fifth thing")
        def test_setup_fails(broken):
            pass

        @pytest.mark.model_check
        @pytest.mark.spec({THINGS!r}, "First thing")
        @pytest.mark.spec({OTHERS!r}, "Fourth thing")
        @pytest.mark.parametrize("n", [1, 2])
        def test_checks_two(n):
            pass
        """
    )
    out = pytester.path / "out"
    result = run(pytester, "--spec", str(small_spec), "--spec-report", str(out))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=3, failed=1, skipped=1, xfailed=1, errors=1)

    by_name = scenarios(read_json(out))
    tests = {
        name: {(t["nodeid"].split("::")[1], t["outcome"], t["model_check"]) for t in s["tests"]}
        for name, s in by_name.items()
    }
    assert tests == {
        "First thing": {
            ("test_passes", "passed", False),
            ("test_checks_two[1]", "passed", True),
            ("test_checks_two[2]", "passed", True),
        },
        "Second thing": {("test_fails", "failed", False)},
        "Third thing": {("test_skips", "skipped", False)},
        "Fourth thing": {
            ("test_xfails", "skipped", False),
            ("test_checks_two[1]", "passed", True),
            ("test_checks_two[2]", "passed", True),
        },
        "Fifth thing": {("test_setup_fails", "failed", False)},
    }
    outcomes = {name: s["outcome"] for name, s in by_name.items()}
    assert outcomes == {
        "First thing": "passed",
        "Second thing": "failed",
        "Third thing": "skipped",
        "Fourth thing": "passed",  # by its model check; its example test only xfailed
        "Fifth thing": "failed",
    }
    assert by_name["Fourth thing"]["tested_outcome"] == "skipped"
    assert by_name["Fourth thing"]["model_checked_outcome"] == "passed"
    assert all(t["duration"] >= 0 for s in by_name.values() for t in s["tests"])
    # why each failed test failed, with the phase when it was not the call
    messages = {
        t["nodeid"].split("::")[1]: t["message"] for s in by_name.values() for t in s["tests"]
    }
    assert messages["test_fails"] == "assert False"
    assert messages["test_setup_fails"] == "error in setup: RuntimeError: setup fails"
    assert messages["test_passes"] is None
    assert messages["test_skips"] is None
    result.stdout.fnmatch_lines(
        [
            "*- spec conformance -*",
            "conformance of toy",
            "  made by       diagnosis-harness *, Python *",
            "  spec          specs/toy/spec.md",
            "  requirements  0/2 passed (2 failed, 0 skipped, 0 uncovered)",
            "  scenarios     2/5 passed (2 failed, 1 skipped, 0 uncovered); 5 example-tested "
            "(1 passed, 2 failed, 2 skipped), 2 model-checked (2 passed, 0 failed, 0 skipped)",
            "  tests         7 tests naming a scenario (3 passed, 2 failed, 2 skipped; 2 of them "
            "model checks)",
            "  credits       9 test \N{MULTIPLICATION SIGN} scenario credits "
            "(5 passed, 2 failed, 2 skipped)",
            "  FAILED        Things SHALL work / Second thing",
            "      test_outcomes.py::test_fails",
            "        assert False",
            "  SKIPPED       Things SHALL work / Third thing",
            "  FAILED        Other things SHALL work too / Fifth thing",
            "      test_outcomes.py::test_setup_fails",
            "        error in setup: RuntimeError: setup fails",
            "  wrote         *conformance.json, *conformance.md, *conformance.html",
            "FAIL: 2 of 5 scenarios failed; 1 of 5 scenarios were only skipped",
        ]
    )


def test_spec_report_writes_the_three_files(pytester: pytest.Pytester, small_spec: Path) -> None:
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.spec({THINGS!r}, "First thing")
        def test_first():
            pass
        """
    )
    result = run(pytester, "--spec", str(small_spec), "--spec-report", "reports")
    assert result.ret == pytest.ExitCode.OK
    reports = pytester.path / "reports"
    assert sorted(p.name for p in reports.iterdir()) == [
        "conformance.html",
        "conformance.json",
        "conformance.md",
    ]
    data = read_json(reports)
    assert data["summary"]["scenarios"]["total"] == 5
    assert data["summary"]["scenarios"]["passed"] == 1
    assert data["summary"]["all_passed"] is False
    assert "First thing" in (reports / "conformance.md").read_text("utf-8")
    assert "First thing" in (reports / "conformance.html").read_text("utf-8")
    result.stdout.fnmatch_lines(["*wrote *conformance.json, *conformance.md, *conformance.html"])


def _cover(pytester: pytest.Pytester, names: list[tuple[str, str]]) -> None:
    body = ["import pytest", ""]
    for n, (requirement, scenario) in enumerate(names):
        body += [f"@pytest.mark.spec({requirement!r}, {scenario!r})", f"def test_{n}(): pass", ""]
    pytester.makepyfile("\n".join(body))


ALL_FIVE = [
    (THINGS, "First thing"),
    (THINGS, "Second thing"),
    (THINGS, "Third thing"),
    (OTHERS, "Fourth thing"),
    (OTHERS, "Fifth thing"),
]


def test_spec_strict_fails_a_run_with_an_uncovered_scenario(
    pytester: pytest.Pytester, small_spec: Path
) -> None:
    _cover(pytester, [pair for pair in ALL_FIVE if pair[1] != "Third thing"])
    assert run(pytester, "--spec", str(small_spec)).ret == pytest.ExitCode.OK

    result = run(pytester, "--spec", str(small_spec), "--spec-strict")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "  UNCOVERED     Things SHALL work / Third thing",
            "FAIL: 1 of 5 scenarios have no test",
            "--spec-strict: the run fails: not every scenario has a passing test",
        ]
    )


def test_spec_strict_passes_when_every_scenario_passes(
    pytester: pytest.Pytester, small_spec: Path
) -> None:
    _cover(pytester, ALL_FIVE)
    result = run(pytester, "--spec", str(small_spec), "--spec-strict")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "  scenarios     5/5 passed (0 failed, 0 skipped, 0 uncovered)*",
            "PASS: all 5 scenarios passed",
        ]
    )


def test_spec_strict_fails_on_a_skipped_scenario(
    pytester: pytest.Pytester, small_spec: Path
) -> None:
    _cover(pytester, ALL_FIVE[1:])
    pytester.makepyfile(
        test_skipped=f"""
        import pytest

        @pytest.mark.skip(reason="later")
        @pytest.mark.spec({THINGS!r}, "First thing")
        def test_first():
            pass
        """
    )
    result = run(pytester, "--spec", str(small_spec), "--spec-strict")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["  SKIPPED       Things SHALL work / First thing"])


def test_unknown_marks_can_be_reported_instead(pytester: pytest.Pytester, small_spec: Path) -> None:
    _cover(pytester, [*ALL_FIVE, (THINGS, "Frist thing")])
    out = pytester.path / "out"
    args = ("--spec", str(small_spec), "--spec-unknown=report", "--spec-report", str(out))
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=6)
    data = read_json(out)
    assert data["summary"]["scenarios"]["passed"] == 5
    assert data["summary"]["all_passed"] is False
    (unknown,) = data["unknown"]
    assert unknown["nodeid"].endswith("::test_5")
    assert (unknown["requirement"], unknown["scenario"]) == (THINGS, "Frist thing")
    assert unknown["hint"] == f'did you mean @pytest.mark.spec("{THINGS}", "First thing")?'
    assert unknown["outcome"] == "passed"
    result.stdout.fnmatch_lines(
        ["*UNKNOWN MARK  *::test_5: spec(*'Frist thing') names no scenario*"]
    )

    assert run(pytester, *args, "--spec-strict").ret == pytest.ExitCode.TESTS_FAILED


def test_the_ini_option_names_the_spec(pytester: pytest.Pytester, small_spec: Path) -> None:
    elsewhere = pytester.path / "docs" / "toy.md"
    elsewhere.parent.mkdir()
    small_spec.rename(elsewhere)
    pytester.makeini("[pytest]\nspec_files = docs/toy.md\nspec_unknown = report\n")
    _cover(pytester, [(THINGS, "First thing"), (RUN_CONTEXT, REAL_SCENARIO)])
    out = pytester.path / "out"
    result = run(pytester, "--spec-report", str(out))
    assert result.ret == pytest.ExitCode.OK
    data = read_json(out)
    assert data["items"][0]["id"] == "toy"
    assert [(u["requirement"], u["scenario"]) for u in data["unknown"]] == [
        (RUN_CONTEXT, REAL_SCENARIO)
    ]


def test_the_default_spec_is_the_rootdirs(pytester: pytest.Pytester, small_spec: Path) -> None:
    pytester.makeini("[pytest]\ndiagnosis_harness_conformance = true\n")
    _cover(pytester, [(THINGS, "First thing")])
    result = run(pytester)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["conformance of toy", "*", "*", "*", "  scenarios     1/5 passed*"]
    )


def test_without_a_spec_in_the_rootdir_the_shipped_one_is_used(pytester: pytest.Pytester) -> None:
    _cover(pytester, [(RUN_CONTEXT, REAL_SCENARIO)])
    result = run(pytester, *SWITCH)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["conformance of diagnosis-harness-run-context", "*", "*", "*", "*1/16 passed*"]
    )


def test_a_missing_spec_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain(): pass")
    result = run(pytester, "--spec", "nowhere/spec.md")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*spec file not found: *nowhere*spec.md"])


def test_deselected_tests_are_not_checked(pytester: pytest.Pytester, small_spec: Path) -> None:
    _cover(pytester, [(THINGS, "First thing"), (THINGS, "Frist thing")])
    result = run(pytester, "--spec", str(small_spec), "-k", "not test_1")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, deselected=1)


def test_transition_coverage_goes_into_the_report(
    pytester: pytest.Pytester, small_spec: Path
) -> None:
    pytester.makepyfile(
        f"""
        import pytest
        from diagnosis_harness._generated.tables import LIFECYCLE

        @pytest.mark.model_check
        @pytest.mark.spec({THINGS!r}, "First thing")
        def test_takes_a_row(transition_coverage):
            transition_coverage.record(LIFECYCLE, LIFECYCLE.rows[0])
            transition_coverage.record(LIFECYCLE, LIFECYCLE.rows[0])

        def test_shares_the_session_fixture(transition_coverage):
            assert transition_coverage.count(LIFECYCLE, LIFECYCLE.rows[0]) == 2
        """
    )
    out = pytester.path / "out"
    result = run(pytester, "--spec", str(small_spec), "--spec-report", str(out))
    assert result.ret == pytest.ExitCode.OK
    coverage = read_json(out)["coverage"]
    assert all(table["recorded"] for table in coverage.values())
    rows = next(table["rows"] for name, table in coverage.items() if name == "lifecycle")
    assert [row["count"] for row in rows][:2] == [2, 0]
    assert sum(row["count"] for table in coverage.values() for row in table["rows"]) == 2


def test_without_the_fixture_no_coverage_is_recorded(
    pytester: pytest.Pytester, small_spec: Path
) -> None:
    _cover(pytester, [(THINGS, "First thing")])
    out = pytester.path / "out"
    assert run(pytester, "--spec", str(small_spec), "--spec-report", str(out)).ret == 0
    # No coverage, and a spec none of the harness's rows serve: the report lists no table.
    assert read_json(out)["coverage"] == {}


def test_collect_only_checks_the_marks_and_reports_nothing(
    pytester: pytest.Pytester, small_spec: Path
) -> None:
    _cover(pytester, [(THINGS, "First thing")])
    out = pytester.path / "out"
    result = run(pytester, "--spec", str(small_spec), "--spec-report", str(out), "--collect-only")
    assert result.ret == pytest.ExitCode.OK
    assert "- spec conformance -" not in result.stdout.str()
    assert not out.exists()

    _cover(pytester, [(THINGS, "Frist thing")])
    result = run(pytester, "--spec", str(small_spec), "--collect-only")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*did you mean*First thing*"])


def test_several_specs_get_a_report_each(pytester: pytest.Pytester, small_spec: Path) -> None:
    other = pytester.path / "specs" / "other" / "spec.md"
    other.parent.mkdir()
    other.write_text(
        small_spec.read_text("utf-8").replace("# toy Specification", "# other Specification"),
        encoding="utf-8",
    )
    renamed = other.read_text("utf-8").replace("First thing", "Sixth thing")
    other.write_text(renamed, encoding="utf-8")
    _cover(pytester, [(THINGS, "First thing"), (THINGS, "Sixth thing")])
    out = pytester.path / "out"
    args = ("--spec", str(small_spec), "--spec", str(other), "--spec-report", str(out))
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.OK
    toy, second = read_json(out / "toy"), read_json(out / "other")
    assert [t["nodeid"] for t in scenarios(toy)["First thing"]["tests"]] == [
        "test_several_specs_get_a_report_each.py::test_0"
    ]
    assert [t["nodeid"] for t in scenarios(second)["Sixth thing"]["tests"]] == [
        "test_several_specs_get_a_report_each.py::test_1"
    ]
    assert toy["unknown"] == second["unknown"] == []
    result.stdout.fnmatch_lines(
        [
            "conformance of toy",
            "  scenarios     1/5 passed*",
            "conformance of other",
            "  scenarios     1/5 passed*",
        ]
    )
