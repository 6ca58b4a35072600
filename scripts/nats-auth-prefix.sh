#!/bin/sh
# nats-auth-prefix.sh — write the NATS permissions of a second tgnotify
# environment, one with another subject prefix, from the shipped ones
# (configs/nats-server-auth.conf, written for the default prefix notify).
# Needs only a POSIX shell and sed. docs/RUNBOOK.md, "Two environments on one
# NATS account (subject prefix)", explains it.
#
#   scripts/nats-auth-prefix.sh PREFIX [AUTH_CONF] > nats-server-auth-PREFIX.conf
#
# It prints, for PREFIX staging:
#   - every *_PERMISSIONS block renamed STAGING_*_PERMISSIONS, with the names
#     of the prefix: streams STAGING and STAGING_DEAD, subjects staging.>,
#     dead letters dead_staging.staging.<channel>.>, buckets staging_*,
#     failover subjects tgnotify.staging.worker.<channel>.pinned, reply
#     subjects _INBOX_staging-<user>.>;
#   - the user lines to add to the authorization block of the server's
#     configuration, with the nkeys $NKEY_STAGING_<USER>. One server has one
#     authorization block, and it sees the variables of this file only when
#     the file is included from the same file as the block: add
#     `include ./nats-server-auth-staging.conf` to nats-server-auth.conf just
#     above its authorization block, and the lines to the block.
#
# Exit status: 0 on success, 2 for bad usage.

set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: $0 PREFIX [AUTH_CONF]" >&2
	exit 2
fi
prefix=$1
case $prefix in
notify)
	echo "$0: notify is the default prefix: configs/nats-server-auth.conf is written for it" >&2
	exit 2 ;;
dead | dead_* | kv_* | tgnotify)
	echo "$0: $prefix cannot be a subject prefix (see jetstream.ValidatePrefix)" >&2
	exit 2 ;;
esac
if ! printf '%s\n' "$prefix" | grep -Eq '^[a-z][a-z0-9_-]{0,31}$'; then
	echo "$0: $prefix is not a subject prefix: one letter, then lower-case letters, digits, _ and -, at most 32" >&2
	exit 2
fi
here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
conf=${2:-$here/../configs/nats-server-auth.conf}
upper=$(printf '%s' "$prefix" | tr 'a-z' 'A-Z')
var=$(printf '%s' "$upper" | tr '-' '_')

echo "# The permissions of the tgnotify environment with subject prefix $prefix,"
echo "# made by scripts/nats-auth-prefix.sh from $(basename "$conf")."
echo
# The permission blocks, without comments and without the authorization block.
sed -n '/^[A-Z_]*_PERMISSIONS = {/,/^}/p' "$conf" | sed -E \
	-e "s/tgnotify\.worker\./tgnotify.$prefix.worker./g" \
	-e "s/dead\.notify\./dead_$prefix.$prefix./g" \
	-e "s/KV_notify_/KV_${prefix}_/g" \
	-e "s/\\\$KV\.notify_/\$KV.${prefix}_/g" \
	-e "s/(^|[^a-z_])notify\./\1$prefix./g" \
	-e "s/NOTIFY_DEAD/${upper}_DEAD/g" \
	-e "s/\.NOTIFY([^A-Z_]|$)/.$upper\1/g" \
	-e "s/_INBOX_/_INBOX_$prefix-/g" \
	-e "s/^([A-Z_]+)_PERMISSIONS = \{/${var}_\1_PERMISSIONS = {/" \
	-e "/^\}$/G"
echo "# Add to the users of the server's authorization block:"
sed -n 's/^[[:space:]]*{ nkey: \$NKEY_\([A-Z_]*\),[[:space:]]*permissions: \$\([A-Z_]*\) }.*/#   { nkey: $NKEY_'"$var"'_\1, permissions: $'"$var"'_\2 }/p' "$conf"
