#!/usr/bin/env bash
# Mutant check for the recovery tests (issue 23): in a temporary copy of this checkout (tracked files plus
# working-tree edits; the checkout itself is never touched), make resume load the SECOND-newest checkpoint
# instead of the newest, then run the recovery tests against the copy. Every test should FAIL: a test that
# passes under the mutant cannot tell "resumed from the newest checkpoint" from "lost a whole interval more".
#
#   flock /tmp/cuetrain-heavy.lock bash scripts/mutant_resume.sh            # all recovery tests
#   flock /tmp/cuetrain-heavy.lock bash scripts/mutant_resume.sh -k sigterm  # extra pytest arguments
#   flock /tmp/cuetrain-heavy.lock bash scripts/mutant_resume.sh tests/cue_plugin/test_elastic.py  # only these
#
# Needs the checkout's .venv (bash scripts/setup.sh); the multihost test also needs root (netns).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/cuetrain-mutant.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
(cd "$repo" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -cf - 2>/dev/null) | tar -xf - -C "$tmp"
target=trainer/learn/run_writer.py
orig='for step, path in reversed(paths.list_checkpoints()):'
mutant='for step, path in reversed(paths.list_checkpoints()[:-1] or paths.list_checkpoints()):'
grep -qF "$orig" "$tmp/$target" || { echo "mutant_resume: '$orig' not found in $target: update this script" >&2; exit 2; }
sed -i "s/$(printf '%s' "$orig" | sed 's/[][\.*^$/]/\\&/g')/$(printf '%s' "$mutant" | sed 's/[][\.*^$/&]/\\&/g')/" "$tmp/$target"
grep -qF "$mutant" "$tmp/$target" || { echo "mutant_resume: sed did not apply" >&2; exit 2; }
echo "mutant applied in $tmp/$target:"; grep -nF "$mutant" "$tmp/$target"
tests=(tests/cue_plugin/test_e2e_recovery.py tests/cue_plugin/test_elastic.py
       "tests/multihost/test_multihost.py::test_c_a_host_whose_link_goes_down_fails_the_survivors_in_time_and_the_gang_recovers")
if [[ $# -gt 0 && $1 != -* ]]; then tests=(); fi  # test paths given: run those instead of the default list
cd "$tmp"
# PYTHONPATH puts the copy ahead of the editable install of $repo; tests/conftest.py gives children the copy too
set +e
PYTHONPATH="$tmp" "$repo/.venv/bin/python" -m pytest -p no:cacheprovider -q -rA "${tests[@]}" "$@" | tee "$tmp/out.txt"
set -e
echo "--- under the mutant (every recovery test should be FAILED):"
grep -E '^(PASSED|FAILED|ERROR|SKIPPED)' "$tmp/out.txt" || true
if grep -qE '^PASSED' "$tmp/out.txt"; then echo "mutant SURVIVED in the PASSED tests above" >&2; exit 1; fi
grep -qE '^FAILED' "$tmp/out.txt" || { echo "no test ran to a FAILED result" >&2; exit 1; }
echo "mutant killed by every test that ran"
