#!/bin/sh
# dead-letters.sh — list, replay and purge tgnotify's dead letters with the
# nats CLI (natscli v0.5.0, built by `make build` as bin/nats). Needs only a
# POSIX shell, sed and base64; no jq, no python. docs/RUNBOOK.md explains when
# to use each command.
#
#   scripts/dead-letters.sh list [REASON]        one line per dead letter (optionally of one reason)
#   scripts/dead-letters.sh replay SEQ...        publish dead letters SEQ... back to NOTIFY
#   scripts/dead-letters.sh replay-reason REASON replay every dead letter of REASON
#   scripts/dead-letters.sh purge-reason REASON  delete every dead letter of REASON
#
# A replay publishes the dead letter's body, unchanged, to its original
# subject (Notify-Original-Subject) with:
#   Nats-Msg-Id: <key>:replay:<dead-letter seq>   new, so JetStream's duplicate
#                                                 window does not drop it; and
#                                                 the same for a second replay
#                                                 of the same dead letter, which
#                                                 the window does drop
#   Notify-Key: <key>                             the original idempotency key:
#                                                 the worker looks it up in
#                                                 notify_delivered and never
#                                                 sends a key twice
#   Notify-Created-At, Content-Type               copied from the dead letter
#   Notify-Replay-Of: NOTIFY_DEAD:<seq>           for the audit trail
# The dead letter itself stays in NOTIFY_DEAD until it is purged.
#
# Environment:
#   NATS_URL, NATS_CREDS, NATS_USER, NATS_PASSWORD, NATS_CONTEXT, ...
#             how the nats CLI connects (see `bin/nats --help`)
#   NATS_CLI  the nats CLI (default: bin/nats of this repository, else `nats`)
#   DEAD_STREAM  the dead-letter stream (default NOTIFY_DEAD)
#
# Exit status: 0 on success, 1 if any dead letter could not be handled, 2 for
# bad usage.

set -eu

STREAM=${DEAD_STREAM:-NOTIFY_DEAD}
if [ -z "${NATS_CLI:-}" ]; then
	here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
	if [ -x "$here/../bin/nats" ]; then
		NATS_CLI="$here/../bin/nats"
	else
		NATS_CLI=nats
	fi
fi

usage() {
	sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

die() {
	echo "dead-letters: $*" >&2
	exit 1
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dead-letters.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# fetch SEQ: read dead letter SEQ into $tmp/subject, $tmp/headers and
# $tmp/body. Returns 1 when the message does not exist (deleted or purged);
# exits on any other error.
fetch() {
	if ! "$NATS_CLI" stream get "$STREAM" "$1" --json >"$tmp/msg.json" 2>"$tmp/err"; then
		if grep -q 'no message found' "$tmp/err"; then
			return 1
		fi
		die "reading $STREAM #$1: $(cat "$tmp/err")"
	fi
	sed -n 's/^ *"subject": "\(.*\)",\{0,1\}$/\1/p' "$tmp/msg.json" >"$tmp/subject"
	sed -n 's/^ *"hdrs": "\(.*\)",\{0,1\}$/\1/p' "$tmp/msg.json" | base64 -d | tr -d '\r' >"$tmp/headers"
	sed -n 's/^ *"data": "\(.*\)",\{0,1\}$/\1/p' "$tmp/msg.json" | base64 -d >"$tmp/body"
}

# header NAME: the first value of header NAME of the fetched dead letter.
header() {
	sed -n "s/^$1: *//p" "$tmp/headers" | head -n 1
}

# template_escape VALUE: nats pub expands Go templates in header values;
# write {{ so that it stays literal.
template_escape() {
	printf '%s' "$1" | sed 's/{{/{{"{{"}}/g'
}

# bounds: print the first and the last sequence of the stream.
bounds() {
	"$NATS_CLI" stream info "$STREAM" --json >"$tmp/info.json" 2>"$tmp/err" ||
		die "reading stream $STREAM: $(cat "$tmp/err")"
	first=$(sed -n 's/^ *"first_seq": \([0-9]*\),\{0,1\}$/\1/p' "$tmp/info.json" | head -n 1)
	last=$(sed -n 's/^ *"last_seq": \([0-9]*\),\{0,1\}$/\1/p' "$tmp/info.json" | head -n 1)
	if [ -z "$first" ] || [ -z "$last" ]; then
		die "cannot read the sequence range of $STREAM"
	fi
	echo "$first $last"
}

# replay_one SEQ: publish the fetched dead letter SEQ back to its subject.
# Prints one line; returns 1 on failure.
replay_one() {
	seq=$1
	key=$(header Notify-Key)
	if [ -z "$key" ]; then
		echo "#$seq: no Notify-Key header; not replayable (a poison message: fix the producer instead)" >&2
		return 1
	fi
	subject=$(header Notify-Original-Subject)
	if [ -z "$subject" ]; then
		subject=$(sed 's/^dead\.//' "$tmp/subject")
	fi
	case $subject in
	notify.events.*)
		echo "#$seq: original subject \"$subject\" is an event, not a notification; not replayed" >&2
		return 1
		;;
	notify.*.*) ;;
	*)
		echo "#$seq: original subject \"$subject\" is not notify.<channel>.<recipient>; not replayed" >&2
		return 1
		;;
	esac
	created=$(header Notify-Created-At)
	ctype=$(header Content-Type)
	set -- -H "Nats-Msg-Id:$(template_escape "$key:replay:$seq")" \
		-H "Notify-Key:$(template_escape "$key")" \
		-H "Content-Type:$(template_escape "${ctype:-application/json}")" \
		-H "Notify-Replay-Of:$STREAM:$seq"
	if [ -n "$created" ]; then
		set -- "$@" -H "Notify-Created-At:$(template_escape "$created")"
	fi
	if ! "$NATS_CLI" pub --jetstream --no-templates --force-stdin "$@" "$subject" <"$tmp/body" >"$tmp/pub" 2>&1; then
		echo "#$seq: publishing $key to $subject failed: $(cat "$tmp/pub")" >&2
		return 1
	fi
	stored=$(sed -n 's/.*Stored in Stream: \([^ ]*\) Sequence: \([0-9]*\).*/\1 #\2/p' "$tmp/pub" | head -n 1)
	if grep -q 'Duplicate: true' "$tmp/pub"; then
		echo "#$seq $key: already replayed (JetStream holds $key:replay:$seq as $stored); not published again"
	else
		echo "#$seq $key: replayed to $subject as $stored"
	fi
}

# scan REASON ACTION: run ACTION SEQ for every existing dead letter whose
# Notify-Reason is REASON (every one when REASON is empty), from the first to
# the last sequence at the start of the scan: dead letters written while it
# runs (a replay that failed again) are left for the next run.
scan() {
	reason=$1
	action=$2
	range=$(bounds)
	seq=${range% *}
	last=${range#* }
	[ "$seq" -ge 1 ] || seq=1
	failed=0
	matched=0
	while [ "$seq" -le "$last" ]; do
		if fetch "$seq"; then
			if [ -z "$reason" ] || [ "$(header Notify-Reason)" = "$reason" ]; then
				matched=$((matched + 1))
				"$action" "$seq" || failed=$((failed + 1))
			fi
		fi
		seq=$((seq + 1))
	done
	echo "$matched dead letter(s)${reason:+ of reason $reason}; $failed failed" >&2
	[ "$failed" -eq 0 ]
}

list_one() {
	# dead.notify.<channel>.<reason>.<recipient>
	channel=$(sed -n 's/^dead\.notify\.\([^.]*\)\..*/\1/p' "$tmp/subject")
	recipient=$(sed -n 's/^dead\.notify\.[^.]*\.[^.]*\.//p' "$tmp/subject")
	printf '%-7s %-20s %-9s %-17s %-15s %s  %s %s\n' "$1" "$(header Notify-Dead-At | cut -c1-19)" \
		"${channel:-?}" "$(header Notify-Reason)" "${recipient:-?}" "$(header Notify-Key)" \
		"$(header Notify-Error-Code)" "$(header Notify-Error-Description)"
}

purge_one() {
	if "$NATS_CLI" stream rmm "$STREAM" "$1" -f >"$tmp/rmm" 2>&1; then
		echo "#$1 $(header Notify-Key): deleted"
	else
		echo "#$1: deleting failed: $(cat "$tmp/rmm")" >&2
		return 1
	fi
}

[ $# -ge 1 ] || usage
command=$1
shift
case $command in
list)
	[ $# -le 1 ] || usage
	printf '%-7s %-20s %-15s %-15s %s  %s\n' SEQ DEAD_AT REASON CHAT KEY ERROR
	scan "${1:-}" list_one
	;;
replay)
	[ $# -ge 1 ] || usage
	failed=0
	for seq in "$@"; do
		case $seq in
		'' | *[!0-9]*) die "\"$seq\" is not a sequence number" ;;
		esac
		if fetch "$seq"; then
			replay_one "$seq" || failed=$((failed + 1))
		else
			echo "#$seq: no such dead letter in $STREAM" >&2
			failed=$((failed + 1))
		fi
	done
	[ "$failed" -eq 0 ]
	;;
replay-reason)
	if [ $# -ne 1 ] || [ -z "$1" ]; then usage; fi
	scan "$1" replay_one
	;;
purge-reason)
	if [ $# -ne 1 ] || [ -z "$1" ]; then usage; fi
	scan "$1" purge_one
	;;
-h | --help | help)
	usage
	;;
*)
	usage
	;;
esac
