#!/usr/bin/env bash
# Validate the project's OpenSpec specs (specs/<capability>/spec.md) with
# OpenSpec's own validator, in strict mode.
#
# OpenSpec looks for its root by walking up from the current directory to the
# nearest directory holding `openspec/specs/` (or `openspec/changes/`). Our
# specs live at the top-level `specs/`, so this script copies them into a
# throw-away `<tmp>/openspec/specs/` and runs the validator there. (A copy,
# not a symlink: OpenSpec does not follow symlinked directories.)
#
# The result is judged from the JSON report, not only from the exit status:
# every spec.md under specs/ must appear in the report, every item must be
# valid, no issue may be at ERROR level and the summary must count no failure.
# (--strict matters: without it a requirement body lacking SHALL/MUST is only a
# WARNING and the spec is reported valid.) A small structure check then catches
# what the validator lets through: stray level-3/4 headings under
# `## Requirements` and scenario lines that are not WHEN/THEN/AND/GIVEN bullets.
#
# The validator and every npm package it needs are installed with `npm ci` from
# tools/openspec/package-lock.json (exact versions, integrity hashes), never resolved afresh: a
# release of any of them reaches CI only when `bash .ci/lock` refreshes that lock.
#
# Usage: tools/openspec-validate.sh [SPECS_DIR]   (default: <repo>/specs)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
specs_dir="${1:-"$repo_root/specs"}"

if [[ ! -d "$specs_dir" ]]; then
    echo "openspec-validate: no specs directory at $specs_dir" >&2
    exit 2
fi
specs_dir="$(cd "$specs_dir" && pwd)"

for tool in npm python3; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "openspec-validate: '$tool' is required but not on PATH" >&2
        exit 2
    fi
done

work_dir="$(mktemp -d -t openspec-validate.XXXXXX)"
trap 'rm -rf -- "$work_dir"' EXIT

mkdir -p "$work_dir/root/openspec"
cp -R -- "$specs_dir" "$work_dir/root/openspec/specs"

export OPENSPEC_TELEMETRY=0
export npm_config_update_notifier=false
export NO_COLOR=1

# Outside the copy's root, so that OpenSpec's root search cannot meet it. From npm's cache when it
# holds the locked tarballs (their integrity is checked either way), without asking the registry
# again. No install scripts: the validator needs none.
mkdir -p "$work_dir/npm"
cp -- "$repo_root/tools/openspec/package.json" "$repo_root/tools/openspec/package-lock.json" \
    "$work_dir/npm/"
if ! npm ci --prefix "$work_dir/npm" --prefer-offline --ignore-scripts --no-audit --no-fund \
    --silent; then
    echo "openspec-validate: npm ci failed for tools/openspec/package-lock.json (offline, or no registry?)" >&2
    exit 2
fi

status=0
(
    cd "$work_dir/root"
    "$work_dir/npm/node_modules/.bin/openspec" validate --specs --strict --json --no-interactive
) >"$work_dir/report.json" 2>"$work_dir/stderr.txt" || status=$?

python3 - "$work_dir/report.json" "$specs_dir" "$status" "$work_dir/stderr.txt" <<'PY'
import json
import os
import sys

report_path, specs_dir, status, stderr_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]


def fail(message):
    print(f"openspec-validate: FAIL: {message}", file=sys.stderr)
    with open(stderr_path, encoding="utf-8", errors="replace") as fh:
        err = fh.read().strip()
    if err:
        print("--- openspec stderr ---\n" + err, file=sys.stderr)
    sys.exit(1)


# The spec files OpenSpec should discover: every spec.md inside a capability
# folder (nested folders allowed), skipping dot-directories.
expected = set()
for dirpath, dirnames, filenames in os.walk(specs_dir):
    dirnames[:] = [d for d in dirnames if not d.startswith(".")]
    rel = os.path.relpath(dirpath, specs_dir)
    if rel != "." and "spec.md" in filenames:
        expected.add(rel.replace(os.sep, "/"))
if not expected:
    fail(f"no specs/<capability>/spec.md found under {specs_dir}")

try:
    with open(report_path, encoding="utf-8") as fh:
        report = json.load(fh)
except (OSError, ValueError) as exc:
    with open(report_path, encoding="utf-8", errors="replace") as fh:
        print(fh.read(), file=sys.stderr)
    fail(f"validator did not produce a JSON report (exit status {status}): {exc}")

problems = []
items = report.get("items")
if not isinstance(items, list):
    fail(f"JSON report has no 'items' list: {report!r}")

for item in items:
    valid = item.get("valid")
    mark = "ok  " if valid is True else "FAIL"
    print(f"{mark} {item.get('type')} {item.get('id')}")
    for issue in item.get("issues") or []:
        line = f":{issue['line']}" if issue.get("line") is not None else ""
        print(f"     {issue.get('level')} {issue.get('path')}{line}: {issue.get('message')}")
        if issue.get("level") == "ERROR":
            problems.append(f"{item.get('id')}: {issue.get('message')}")
    if valid is not True:
        problems.append(f"{item.get('id')}: reported invalid")

reported = {item.get("id") for item in items if item.get("type") == "spec"}
missing = sorted(expected - reported)
if missing:
    problems.append(f"specs not validated: {', '.join(missing)}")

totals = (report.get("summary") or {}).get("totals") or {}
if totals.get("failed") != 0:
    problems.append(f"summary reports failed={totals.get('failed')!r}")
if totals.get("passed") != totals.get("items") or not totals.get("items"):
    problems.append(f"summary reports passed={totals.get('passed')!r} of items={totals.get('items')!r}")
if report.get("status"):
    problems.append(f"root selection diagnostics: {report['status']!r}")
if status != 0:
    problems.append(f"validator exited with status {status}")

# Structure the validator lets through (checked on OpenSpec 1.13.2, tools/openspec/package.json's): a
# mistyped `### Scenario:` silently ends the requirement above it and drops
# that scenario, and scenario steps are never checked for WHEN/THEN bullets.
import re

STEP = re.compile(r"- \*\*(GIVEN|WHEN|THEN|AND)\*\* \S")
for spec_id in sorted(expected):
    path = os.path.join(specs_dir, *spec_id.split("/"), "spec.md")
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    in_requirements = in_fence = False
    scenario = None  # (line number, name, steps seen)

    def close_scenario():
        if scenario is not None:
            lineno, name, steps = scenario
            for needed in ("WHEN", "THEN"):
                if needed not in steps:
                    problems.append(f"{spec_id}:{lineno}: scenario {name!r} has no - **{needed}** step")

    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        heading = re.match(r"(#+)\s", line)
        if heading:
            close_scenario()
            scenario = None
            level = len(heading.group(1))
            if level <= 2:
                in_requirements = line.strip() == "## Requirements"
            elif in_requirements and level == 3 and not line.startswith("### Requirement: "):
                problems.append(f"{spec_id}:{number}: level-3 heading is not '### Requirement: ...': {line!r}")
            elif in_requirements and level == 4:
                if line.startswith("#### Scenario: "):
                    scenario = (number, line[len("#### Scenario: "):].strip(), set())
                else:
                    problems.append(f"{spec_id}:{number}: level-4 heading is not '#### Scenario: ...': {line!r}")
            elif in_requirements and level > 4:
                problems.append(f"{spec_id}:{number}: unexpected heading inside Requirements: {line!r}")
            continue
        if scenario is not None and line.strip():
            step = STEP.match(line)
            if step:
                scenario[2].add(step.group(1))
            else:
                problems.append(f"{spec_id}:{number}: scenario line is not a '- **WHEN|THEN|AND|GIVEN** ...' step: {line!r}")
    close_scenario()

if problems:
    fail("; ".join(problems))
print(f"openspec-validate: {totals['passed']}/{totals['items']} spec(s) valid (strict)")
PY
