#!/bin/bash
# Session 29 call 3: the mend 295e07a (RG: RingPos; the ready / state-free barriers only with the copy warp)
# against MG (main's halo SASS before it) on conv_ab's default rows, two rounds; RG's tests and its
# sanitizers (memcheck, racecheck, synccheck on the halo tests).
cd "$(dirname "$0")"
../../../conv_ab.sh bundle.tar.xz --test RG --sanitize RG --rounds 2 MG RG
