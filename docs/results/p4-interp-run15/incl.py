import sys, re, collections
# perf script with call chains: sample = block of lines separated by blank lines
def demangle(s):
    s = re.sub(r'17h[0-9a-f]{16}E', '', s)
    s = re.sub(r'\.llvm\.\d+', '', s)
    return s
def short(s):
    s = s.replace(' (inlined)','')
    s = re.sub(r'::h[0-9a-f]{16}','',s)
    s = re.sub(r'<impl [^>]*>','Run',s)
    if '::' in s and not s.startswith('_ZN'):
        return '::'.join(s.split('::')[-2:])[:70]
    s = demangle(s)
    m = re.findall(r'(\d+)([A-Za-z_][A-Za-z0-9_$.]*)', s)
    # take last 2 path components for legacy mangling
    if s.startswith('_ZN'):
        parts=[]; i=3
        while i < len(s) and s[i].isdigit():
            j=i
            while s[j].isdigit(): j+=1
            n=int(s[i:j]); parts.append(s[j:j+n]); i=j+n
        return '::'.join(parts[-2:])
    return s[:60]
root = sys.argv[2] if len(sys.argv)>2 else None
samples=[]; cur=[]
for line in open(sys.argv[1]):
    line=line.strip()
    if not line:
        if cur: samples.append(cur); cur=[]
        continue
    parts=line.split(None,1)
    if len(parts)==2: cur.append(short(parts[1]))
if cur: samples.append(cur)
tot=len(samples)
incl=collections.Counter(); under=collections.Counter(); nroot=0
for st in samples:  # st[0] is leaf
    seen=set()
    for f in st:
        if f not in seen: incl[f]+=1; seen.add(f)
    if root:
        idx=[i for i,f in enumerate(st) if root in f]
        if idx:
            nroot+=1
            top=max(idx)
            seen=set()
            for f in st[:top]:
                if f not in seen: under[f]+=1; seen.add(f)
print("samples",tot)
if root:
    print("under",root,nroot, "%.1f%%"%(100*nroot/tot))
    for f,c in under.most_common(45): print("%6.2f%% %s"%(100*c/tot,f))
else:
    for f,c in incl.most_common(80): print("%6.2f%% %s"%(100*c/tot,f))
