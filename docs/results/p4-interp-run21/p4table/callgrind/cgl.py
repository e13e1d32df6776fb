#!/usr/bin/env python3
"""Self cost per function and per source line from a callgrind file.
Usage: cgl.py FILE PACKETS [EVENT] [N] [--lines]"""
import sys, re, collections
path=sys.argv[1]; pk=float(sys.argv[2]); ev=sys.argv[3] if len(sys.argv)>3 else 'D1mr'
N=int(sys.argv[4]) if len(sys.argv)>4 else 40
lines_mode='--lines' in sys.argv
names={'fl':{},'fn':{},'ob':{}}
def nm(kind,s):
    m=re.match(r'\((\d+)\)(?:\s+(.*))?',s)
    if not m: return s
    i,n=m.group(1),m.group(2)
    d=names['fl' if kind in('fl','fi','fe','cfi','cfl') else ('fn' if kind in('fn','cfn') else 'ob')]
    if n is not None: d[i]=n
    return d.get(i,'?')
events=None; fl=fi=fn=None; last=0; skip=False
byfn=collections.Counter(); byline=collections.Counter()
for raw in open(path):
    l=raw.rstrip('\n')
    if l.startswith('events:'):
        events=l.split()[1:]; idx=events.index(ev); continue
    m=re.match(r'^(fl|fi|fe|fn|cfi|cfl|cfn|ob|cob)=(.*)$',l)
    if m:
        k,v=m.groups(); n=nm(k,v)
        if k=='fl': fl=fi=n
        elif k in('fi','fe'): fi=n
        elif k=='fn': fn=n; fi=fl
        continue
    if l.startswith('calls='): skip=True; continue
    if not l or not (l[0].isdigit() or l[0] in '+-*'): continue
    parts=l.split()
    p=parts[0]
    if p=='*': ln=last
    elif p[0] in '+-': ln=last+int(p)
    else: ln=int(p)
    last=ln
    if skip: skip=False; continue
    vals=parts[1:]
    if len(vals)>idx:
        c=int(vals[idx])
        if c:
            byfn[fn]+=c; byline[(fi,ln,fn)]+=c
tot=sum(byfn.values())
print(f"total {ev} per packet {tot/pk:.2f}")
src=byline if lines_mode else byfn
for k,c in src.most_common(N):
    if lines_mode:
        f,ln,fn=k; print(f"{c/pk:7.2f} {f.split('/src/')[-1]}:{ln}  [{fn[:90]}]")
    else:
        print(f"{c/pk:7.2f} {k[:150]}")
