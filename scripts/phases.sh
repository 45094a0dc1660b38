#!/usr/bin/env bash
# Runs a make target's phases in order, announcing each as it starts, and
# prints a table of their wall times at the end. The first phase that
# fails ends the run (the table shows it, and the rest as not run) and its
# exit status is the script's.
#
#   scripts/phases.sh TITLE NAME COMMAND [NAME COMMAND ...]
#
# Each COMMAND is one shell command line (bash -c).
set -uo pipefail

title=$1
shift
names=()
cmds=()
while (($# >= 2)); do
	names+=("$1")
	cmds+=("$2")
	shift 2
done
if (($# != 0)) || ((${#names[@]} == 0)); then
	echo "usage: $0 TITLE NAME COMMAND [NAME COMMAND ...]" >&2
	exit 2
fi

now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.1f", a - b }'; }
secs=()
states=()
rc=0
start=$(now)
for i in "${!names[@]}"; do
	if ((rc != 0)); then
		secs+=("")
		states+=("not run")
		continue
	fi
	printf '\n==> %s: phase %d/%d, %s (%s)\n' "$title" $((i + 1)) "${#names[@]}" "${names[$i]}" "${cmds[$i]}"
	t0=$(now)
	bash -c "${cmds[$i]}"
	rc=$?
	secs+=("$(since "$t0")")
	if ((rc == 0)); then
		states+=("ok")
	else
		states+=("FAILED (exit $rc)")
	fi
done
total=$(since "$start")

printf '\n==> %s: phase times\n\n' "$title"
printf '%-12s %9s  %s\n' phase seconds result
for i in "${!names[@]}"; do
	if [ -n "${secs[$i]}" ]; then
		printf '%-12s %9.1f  %s\n' "${names[$i]}" "${secs[$i]}" "${states[$i]}"
	else
		printf '%-12s %9s  %s\n' "${names[$i]}" "-" "${states[$i]}"
	fi
done
whole=${total%.*}
printf '%-12s %9.1f  (%dm%02ds)\n' total "$total" $((whole / 60)) $((whole % 60))
exit $rc
