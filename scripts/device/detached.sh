#!/usr/bin/env bash
# Run scripts/device/gpu_session.sh past one call's 600 s limit (session 24): `start` runs it
# detached (setsid) from a private copy of the tree, so later calls may resync the tree;
# `wait S` polls until it ends or S seconds pass, then brings its logs back under $OUT.
# Calls must follow each other within the machine's 30 s idle window.
#   run: WARM_TIMEOUT=1100 BENCH=" " bash scripts/device/detached.sh start; bash scripts/device/detached.sh wait 560
#   run: bash scripts/device/detached.sh wait 580        # again, until it says "ended"
# The environment of `start` (SKIP_TESTS, BENCH, NCU, ...) goes to gpu_session.sh.
LOGS=/tmp/detached; COPY=/tmp/detached_tree
case "$1" in
  start)
    rm -rf "$COPY" "$LOGS"; mkdir -p "$LOGS"; cp -a . "$COPY" || exit 1
    (cd "$COPY" && OUT=$LOGS setsid nohup bash -c 'bash scripts/device/gpu_session.sh; echo "rc=$?" > '"$LOGS"'/ended' \
      > "$LOGS/session.log" 2>&1 < /dev/null &)
    echo "started at $(date +%T); logs in $LOGS" ;;
  wait)
    limit=${2:-560}; t0=$(date +%s)
    while [ ! -f "$LOGS/ended" ] && [ $(( $(date +%s) - t0 )) -lt "$limit" ]; do sleep 5; done
    [ -f "$LOGS/ended" ] && echo "ended: $(cat "$LOGS/ended") after $(( $(date +%s) - t0 ))s of this wait" \
      || echo "still running after ${limit}s: call wait again"
    cat "$LOGS/session.log"
    # at most 8 files come back: the session's own logs first
    [ -n "$OUT" ] && ls -t "$LOGS" | grep -v '^ended$' | head -8 | while read -r f; do cp "$LOGS/$f" "$OUT/"; done ;;
  *) echo "usage: detached.sh start | wait [seconds]" >&2; exit 2 ;;
esac
