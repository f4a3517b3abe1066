#!/bin/bash
cd "$(dirname "$0")"; H=$(pwd)
mkdir -p /tmp/site /tmp/fr
tar -xJf ../spconv/site.tar.xz -C /tmp/site && tar -xJf ../spconv/extra.tar.xz -C /tmp/site && tar -xJf frugal.tar.xz -C /tmp/fr
PYTHONPATH=/tmp/site:/tmp/fr:$H timeout 200 python3 b2b.py 1024 64 > $OUT/b2b_1024_64.txt 2>&1; echo rc=$? >> $OUT/b2b_1024_64.txt
PYTHONPATH=/tmp/site:/tmp/fr:$H timeout 150 python3 b2b.py 512 64 > $OUT/b2b_512_64.txt 2>&1; echo rc=$? >> $OUT/b2b_512_64.txt
cat $OUT/b2b_*.txt
