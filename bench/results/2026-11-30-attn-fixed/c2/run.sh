#!/usr/bin/env bash
cd "$(dirname "$0")"
for c in 8 12; do for s in 1,32,8,128,131072 8,32,8,128,32768; do echo "== $s call $c"; FRUGAL_TRACE_CALL=$c ./trace_da --shape $s 2>&1 | grep -v "^device\|read band\|timing"; done; done
FRUGAL_TRACE_CALL=8 ./trace_da --shape 1,32,8,128,4096 2>&1 | grep -v "^device\|read band\|timing"
