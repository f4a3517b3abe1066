#!/bin/bash
cd "$(dirname "$0")"; H=$(pwd)
mkdir -p /tmp/fr && tar -xJf frugal.tar.xz -C /tmp/fr
PYTHONPATH=/tmp/fr:$H timeout 120 python3 host.py > $OUT/host.txt 2>&1; echo rc=$? >> $OUT/host.txt
cat $OUT/host.txt
