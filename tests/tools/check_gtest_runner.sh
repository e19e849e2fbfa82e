#!/usr/bin/env bash
# tools/gpu/run_gtests.sh (how run_gpu_checks.sh runs the GPU tests) lets no
# test hide another: against a stand-in for a GoogleTest binary whose tests
# pass, fail, abort on a fatal check, hang, and skip, every test gets its
# own result, the ones after a crash and a hang run in new processes, a hang
# is ended after the per-test limit, and the exit status says failed (1) or
# only skipped (77); GTEST_EACH=1 starts a process per test; the budget
# leaves the tests it cannot reach NOTRUN; a missing binary is a failure.
# usage: check_gtest_runner.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
runner=$root/tools/gpu/run_gtests.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/fake_tests" <<'EOF'
#!/usr/bin/env bash
# A.pass A.fail A.crash A.hang B/P.skip/0 B/P.pass/1, in that order; FAKE_TESTS narrows the list.
all=${FAKE_TESTS:-"A.pass A.fail A.crash A.hang B/P.skip/0 B/P.pass/1"}
if [[ $1 == --gtest_list_tests ]]; then
  echo "Running main() from gtest_main.cc"
  suite=""
  for t in $all; do
    [[ ${t%.*}. != "$suite" ]] && { suite=${t%.*}.; echo "$suite"; }
    echo "  ${t##*.}  # GetParam() = x"
  done
  exit 0
fi
filter=${1#--gtest_filter=}
for t in $all; do
  case ":$filter:" in *":$t:"*) ;; *) continue ;; esac
  echo "[ RUN      ] $t"
  case $t in
    *.pass*) echo "[       OK ] $t (1 ms)" ;;
    A.fail) echo "x.cc:3: Failure"; echo "Expected equality of 1 and 2"; echo "[  FAILED  ] $t (2 ms)" ;;
    A.crash) echo "F1204 x.cc:9] Check failed: ptr != nullptr" >&2; kill -ABRT $$ ;;
    A.hang) echo "waiting for a peer"; sleep 60 ;;
    *.skip*) echo "x.cc:5: Skipped"; echo "no CUDA device"; echo "[  SKIPPED ] $t, where GetParam() = 0 (0 ms)" ;;
  esac
done
EOF
chmod +x "$work/fake_tests"
failures=0
expect() {  # expect WHAT PATTERN FILE
  if grep -qE "$2" "$3"; then echo "ok   $1"; else echo "FAIL $1: no line matching '$2' in:"; cat "$3"; failures=$((failures + 1)); fi
}

"$runner" "$work/fake_tests" '*' 2 60 > "$work/one.log" 2>&1
rc=$?
[[ $rc == 1 ]] && echo "ok   exit 1 when tests fail" || { echo "FAIL exit $rc, not 1"; failures=$((failures + 1)); }
expect "a failure is recorded with its message" '^RESULT FAIL A.fail: x.cc:3: Failure \| Expected equality' "$work/one.log"
expect "a fatal check is a CRASH with its last words" '^RESULT CRASH A.crash: the process ended, exit 134 \(signal 6\); last said: .*Check failed' "$work/one.log"
expect "a hang is ended after the per-test limit" '^RESULT TIMEOUT A.hang: ran past 2 s; last said: waiting for a peer' "$work/one.log"
expect "the tests after a crash and a hang still run" '^RESULT SKIP B/P.skip/0: no CUDA device' "$work/one.log"
expect "every test has a result, in 3 processes" '^fake_tests: 6 tests in 3 processes: 2 passed, 1 skipped, 1 failed, 1 crashed, 1 timed out, 0 not run' "$work/one.log"
expect "the first failure is named" '^first failure: A.fail \(FAIL\)' "$work/one.log"

GTEST_EACH=1 "$runner" "$work/fake_tests" '*' 2 60 > "$work/each.log" 2>&1
expect "GTEST_EACH=1: a process per test" '^fake_tests: 6 tests in 6 processes: 2 passed, 1 skipped' "$work/each.log"

"$runner" "$work/fake_tests" '*' 30 3 > "$work/budget.log" 2>&1
expect "past the budget the hang is ended" "^RESULT TIMEOUT A.hang: the part's 3 s ran out" "$work/budget.log"
expect "past the budget the rest are NOTRUN" "^RESULT NOTRUN B/P.pass/1: the part's 3 s were spent" "$work/budget.log"

FAKE_TESTS="A.pass B/P.skip/0" "$runner" "$work/fake_tests" '*' 2 60 > "$work/skip.log" 2>&1
rc=$?
[[ $rc == 77 ]] && echo "ok   exit 77 when none failed and some skipped" || { echo "FAIL exit $rc, not 77"; failures=$((failures + 1)); }
expect "the skip reason is given" '^skipped: 1 of 2 tests, e.g. B/P.skip/0: no CUDA device' "$work/skip.log"

FAKE_TESTS="A.pass B/P.pass/1" "$runner" "$work/fake_tests" '*' 2 60 > "$work/pass.log" 2>&1
rc=$?
[[ $rc == 0 ]] && echo "ok   exit 0 when every test passed" || { echo "FAIL exit $rc, not 0"; failures=$((failures + 1)); }

"$runner" "$work/missing" '*' 2 60 > "$work/missing.log" 2>&1
rc=$?
[[ $rc == 1 ]] && echo "ok   a missing binary fails" || { echo "FAIL exit $rc for a missing binary, not 1"; failures=$((failures + 1)); }
expect "a missing binary is named" "^first failure: $work/missing is missing" "$work/missing.log"
pgrep -f "$work/fake_tests" > /dev/null && { echo "FAIL a killed test left processes behind"; failures=$((failures + 1)); }
(( failures == 0 )) || exit 1
echo "PASS: run_gtests.sh records every test and lets no crash or hang hide another"
