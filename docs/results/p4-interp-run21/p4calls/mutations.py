import subprocess, sys, shutil, os
root='/work/wt/p4calls'
muts = {
 'M1-spec-memo-ignores-insts': ('crates/p4/src/interp/fast.rs', '.position(|(k, s)| *k == key && s.alias == alias && s.insts == insts)', '.position(|(k, s)| *k == key && s.alias == alias)'),
 'M2-csum-subtract-no-complement': ('crates/p4/src/interp/externs.rs', """                self.tr.checksum_recomputed = true;
                let s = if op == CsumOp::Add {
                    s
                } else {
                    !fold(s) & 0xffff
                };""", """                self.tr.checksum_recomputed = true;
                let s = if op == CsumOp::Add { s } else { s };"""),
 'M3-list-enter-not-counted': ('crates/p4/src/interp/externs.rs', """                self.steps += 1;
                self.depth += 1;
                let s = self.csum_items(xs);""", """                self.depth += 1;
                let s = self.csum_items(xs);"""),
 'M4-bound-arg-enter-not-counted': ('crates/p4/src/interp/eval.rs', """                    if let Err(x) = self.enter() {
                        self.recycle(frame);
                        return Err(x);
                    }
                    self.depth -= 1;
                    frame.push(("", Value::Void));""", """                    frame.push(("", Value::Void));"""),
 'M5-nested-inst-arg-noted': ('crates/p4/src/interp/fast.rs', """            if alias.get(k).copied().flatten().is_none()
                && insts.get(k).copied().flatten().is_none()
            {""", """            if alias.get(k).copied().flatten().is_none() {"""),
}
names = sys.argv[1:] or list(muts)
for n in names:
    f, old, new = muts[n]
    path = os.path.join(root, f)
    src = open(path).read()
    assert src.count(old) == 1, n
    shutil.copy(path, '/tmp/p4calls/mut/backup')
    open(path, 'w').write(src.replace(old, new))
    try:
        r = subprocess.run("flock -s /work/wt/quiet.lock cargo test --release -p nicflow-p4 --test interp_calls 2>&1", shell=True, cwd=root, capture_output=True, text=True)
        out = r.stdout
        lines = [l for l in out.splitlines() if l.startswith('test ') or 'panicked' in l or 'left:' in l or 'right:' in l or 'fails' in l or 'passes' in l or 'error[' in l]
        open(f'/tmp/p4calls/mut/{n}.txt','w').write(out)
        print('==', n); print('\n'.join(lines[:14]))
    finally:
        shutil.copy('/tmp/p4calls/mut/backup', path)
        os.utime(path, None)
