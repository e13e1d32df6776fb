#!/bin/sh
# prof.sh under an emptied environment plus a padding variable (other stack
# addresses): the layout check of the miss counts. Usage: prof2.sh BIN TAG ROUTES
B=$1; T=$2; R=$3
env -i PATH=/usr/bin:/bin PAD=$(printf '%0300d' 0) /tmp/p4table/prof.sh $B $T $R
