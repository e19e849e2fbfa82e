#!/usr/bin/env bash
# Runs the GoogleTest cases of BINARY that match FILTER so that one test that
# crashes (a fatal check, a signal) or hangs cannot hide the others: the
# tests are listed (--gtest_list_tests), then one process runs all that are
# left; when it dies inside a test, or a test runs past PER_TEST_S seconds
# (it is killed), that test is recorded as CRASH or TIMEOUT with the last
# lines it printed, and a new process goes on with the tests after it. So
# each test gets a process of its own only when the one before it broke its
# process, and a passing run costs one process start (CUDA context, cuBLASLt
# and cuDNN loads) instead of one per test. GTEST_EACH=1 starts a process for
# every test. Nothing is started once BUDGET_S seconds are spent: the tests
# left are NOTRUN.
#
#   tools/gpu/run_gtests.sh BINARY FILTER PER_TEST_S BUDGET_S
#
# Prints the tests' output, then one line per test that did not pass,
#   RESULT FAIL|CRASH|TIMEOUT|NOTRUN|SKIP NAME: first lines of what it said
# a count line ("BINARY: N tests: P passed, S skipped, F failed ...") and,
# when any failed, "first failure: NAME: ..." (run_gpu_checks.sh quotes it).
# Exit status: 0 when every test passed, 77 when none failed but some
# skipped (no GPU, no NCCL: GTEST_SKIP), 1 otherwise (a failure, or no test
# matched FILTER).
set -uo pipefail
bin=$1 filter=$2 per_test=$3 budget=$4
deadline=$((SECONDS + budget))
name=${bin##*/}
if [[ ! -x $bin ]]; then
  echo "first failure: $bin is missing (a build without CUDA has no GPU tests)"
  exit 1
fi
listing=$(timeout 60 "$bin" --gtest_list_tests --gtest_filter="$filter" 2>&1)
rc=$?
tests=()
suite=""
while IFS= read -r line; do
  if [[ $line =~ ^([^[:space:]#][^[:space:]]*\.)([[:space:]]|$) ]]; then
    suite=${BASH_REMATCH[1]}
  elif [[ -n $suite && $line =~ ^\ \ ([^[:space:]#]+) ]]; then
    tests+=("$suite${BASH_REMATCH[1]}")
  fi
done <<< "$listing"
if (( rc != 0 || ${#tests[@]} == 0 )); then
  echo "$listing"
  echo "first failure: $name --gtest_list_tests --gtest_filter='$filter' exited $rc listing ${#tests[@]} tests: $(grep -v '^$' <<< "$listing" | tail -n 1)"
  exit 1
fi
echo "$name: ${#tests[@]} tests match '$filter'"

declare -A result detail
# lines_of NAME FILE: what the test printed between its RUN line and its result.
lines_of() {
  awk -v run="[ RUN      ] $1" '$0 == run {on = 1; next} on && /^\[ +(OK|FAILED|SKIPPED) +\]/ {exit} on' "$2"
}
# one_line TEXT: its first non-empty lines joined, cut to 300 characters.
one_line() { grep -v '^[[:space:]]*$' | head -n "${1:-3}" | paste -sd'|' - | sed 's/|/ | /g' | cut -c1-300; }

remaining=("${tests[@]}")
processes=0
while (( ${#remaining[@]} > 0 )); do
  if (( deadline - SECONDS < 2 )); then
    for t in "${remaining[@]}"; do result[$t]=NOTRUN detail[$t]="the part's $budget s were spent"; done
    break
  fi
  if [[ ${GTEST_EACH:-0} == 1 ]]; then batch=("${remaining[0]}"); else batch=("${remaining[@]}"); fi
  chunk=$(mktemp)
  # In a process group of its own, so that a kill also ends what it started.
  command -v setsid > /dev/null || setsid() { "$@"; }
  setsid "$bin" --gtest_filter="$(IFS=:; echo "${batch[*]}")" > "$chunk" 2>&1 &
  pid=$!
  processes=$((processes + 1))
  killed="" last="" since=$SECONDS
  {  # stderr away: the shell's own "Killed"/"Aborted" notice (the exit status says it)
    while kill -0 "$pid" 2>/dev/null; do
      sleep 0.5
      current=$(grep -a '^\[ RUN      \] ' "$chunk" | tail -n 1)
      [[ $current != "$last" ]] && { last=$current; since=$SECONDS; }
      if (( SECONDS - since >= per_test )); then killed="ran past $per_test s"; kill -KILL -- "-$pid" || kill -KILL "$pid"; fi
      if (( SECONDS >= deadline )); then killed="the part's $budget s ran out"; kill -KILL -- "-$pid" || kill -KILL "$pid"; fi
    done
    wait "$pid"
    rc=$?
  } 2>/dev/null
  cat "$chunk"
  progress=0
  while read -r status t; do
    case $status in OK) result[$t]=PASS ;; FAILED) result[$t]=FAIL ;; SKIPPED) result[$t]=SKIP ;; esac
    progress=1
    [[ $status == OK ]] || detail[$t]=$(lines_of "$t" "$chunk" | grep -v ': Skipped$' | one_line 3)
  done < <(sed -nE 's/^\[ +(OK|FAILED|SKIPPED) +\] ([^ ,]+)(, where .*)? \([0-9]+ ms\)$/\1 \2/p' "$chunk")
  running=${last#\[ RUN      \] }
  if [[ -n $last && -z ${result[$running]:-} ]]; then
    progress=1
    if [[ -n $killed ]]; then
      result[$running]=TIMEOUT detail[$running]="$killed; last said: $(lines_of "$running" "$chunk" | tail -n 3 | one_line 3)"
    else
      signal=""
      (( rc > 128 )) && signal=" (signal $((rc - 128)))"
      result[$running]=CRASH detail[$running]="the process ended, exit $rc$signal; last said: $(lines_of "$running" "$chunk" | tail -n 3 | one_line 3)"
    fi
    echo "[ ${result[$running]} ] $running: ${detail[$running]}; the tests after it go on in a new process"
  fi
  left=()
  for t in "${remaining[@]}"; do [[ -n ${result[$t]:-} ]] || left+=("$t"); done
  if (( ${#left[@]} > 0 && progress == 0 )); then
    why="$name exited $rc before running them: $(grep -v '^[[:space:]]*$' "$chunk" | tail -n 2 | one_line 2)"
    [[ -n $killed ]] && why="$name $killed before running them"
    for t in "${left[@]}"; do result[$t]=NOTRUN detail[$t]=$why; done
    left=()
  fi
  rm -f "$chunk"
  remaining=("${left[@]}")
done

declare -A count=([PASS]=0 [SKIP]=0 [FAIL]=0 [CRASH]=0 [TIMEOUT]=0 [NOTRUN]=0)
first="" first_skip=""
for t in "${tests[@]}"; do
  s=${result[$t]}
  count[$s]=$((count[$s] + 1))
  [[ $s == PASS ]] && continue
  echo "RESULT $s $t: ${detail[$t]:-}"
  [[ $s == SKIP && -z $first_skip ]] && first_skip="$t: ${detail[$t]:-}"
  [[ $s != SKIP && -z $first ]] && first="$t ($s): ${detail[$t]:-}"
done
bad=$((count[FAIL] + count[CRASH] + count[TIMEOUT] + count[NOTRUN]))
echo "$name: ${#tests[@]} tests in $processes processes: ${count[PASS]} passed, ${count[SKIP]} skipped," \
     "${count[FAIL]} failed, ${count[CRASH]} crashed, ${count[TIMEOUT]} timed out, ${count[NOTRUN]} not run"
if (( bad > 0 )); then
  echo "first failure: $first"
  exit 1
fi
if (( count[SKIP] > 0 )); then
  echo "skipped: ${count[SKIP]} of ${#tests[@]} tests, e.g. $first_skip"
  exit 77
fi
exit 0
