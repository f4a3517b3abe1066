#!/usr/bin/env bash
cd "$(dirname "$0")"
for f in *.xz; do xz -d -k -f $f; chmod +x ${f%.xz}; done
for t in n16b4 n8b4; do ./$t.ta --gtest_brief=1 2>&1 | tail -3; done
sp() { case $1 in n16*|t16*) [ $2 = 1 ] && echo 16 || echo 2;; *) [ $2 = 1 ] && echo 32 || echo 4;; esac; }
for rep in 1 2; do for v in n8 n16 n16b2 n16b4 n16b8 n8b2 n8b4; do
  for B in 8 1; do L=$([ $B = 1 ] && echo 131072 || echo 32768)
   printf "%-6s " $v; ./$v.da --shape $B,32,8,128,$L --splits $(sp $v $B) | grep "^B=" | cut -c1-120; done; done; done
for v in t16b4 t8b4; do for B in 8 1; do L=$([ $B = 1 ] && echo 131072 || echo 32768); echo "== $v B=$B"; FRUGAL_TRACE_CALL=8 ./$v.da --shape $B,32,8,128,$L --splits $(sp $v $B) 2>&1 | grep -v "^device\|read band\|timing\|by SM\|slowest\|per SM"; done; done
