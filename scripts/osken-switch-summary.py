#!/usr/bin/env python3
"""Summarize the logs of scripts/osken-switch-test.sh.

    python3 scripts/osken-switch-summary.py DIR LABEL [--strict-from-maxlen0 OF13_DIR]

Reads DIR/LABEL-<group>.log (osken-manager's output with tester.py), prints
per group: cases, OK, ERROR, and the errors grouped by their message (numbers
that vary between cases, such as checksums, blanked). With
--strict-from-maxlen0 (LABEL being a `+maxlen0` run), also prints what the
unmodified test files give: a case that sends an OUTPUT to a port other than
CONTROLLER (in a flow or a group bucket) fails at "Added incorrect flows" /
"Added incorrect groups" (max_len 65509 sent, 0 read back) whatever else it
would do; the others keep their result. (Since commit 5afa00e nicflow reads
max_len back as sent: its runs use the files as shipped, no --port-max-len0.)
"""
import collections
import glob
import json
import os
import re
import sys

CONTROLLER = 0xFFFFFFFD
RESULT = re.compile(r"^    (.*\S)\s+(OK|ERROR)$")


def parse(path):
    """[(file_description, case_description, result, detail)]"""
    cases = []
    fdesc = None
    lines = open(path, errors="replace").read().replace("\r", "").split("\n")
    for i, line in enumerate(lines):
        if re.match(r"^(action|match|group|meter)[:/ ]", line) and " : " not in line:
            fdesc = line.strip()
            continue
        if line.startswith("--- Test report"):
            break
        m = RESULT.match(line)
        if m:
            detail = ""
            if m.group(2) == "ERROR" and i + 1 < len(lines):
                detail = lines[i + 1].strip()
            cases.append((fdesc, m.group(1).strip(), m.group(2), detail))
    return cases


def _rate(m):
    keys = re.findall(r"'(\w+)': (\d+)", m.group(1))
    names = ",".join(k + "=" + v if k == "ip_dscp" else k for k, v in keys)
    return "{%s} R%s" % (names, m.group(2))


def cause(detail):
    d = re.sub(r"csum=\d+", "csum=N", detail)
    # Measured rates blanked: "{'in_port': 2, 'eth_type': 2048, 'ip_dscp': 20}
    # 769.73kbps" -> "{in_port,eth_type,ip_dscp=20} Rkbps".
    d = re.sub(r"\{([^}]*)\} [\d.]+(kbps|pktps)", _rate, d)
    if d.startswith("Added incorrect flows"):
        if "max_len=65509" in d:
            return "Added incorrect flows: OUTPUT max_len 65509 read back as 0"
        return "Added incorrect flows: " + d[len("Added incorrect flows: "):][:120]
    if d.startswith("Added incorrect meters") or d.startswith("Added incorrect groups"):
        return d[:160]
    return d[:160]


def uses_port_output(case_json):
    found = False

    def walk(v):
        nonlocal found
        if isinstance(v, dict):
            for k, x in v.items():
                if k == "OFPActionOutput" and x.get("port") != CONTROLLER:
                    found = True
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(case_json.get("prerequisite", []))
    return found


def strict_map(of13):
    """(file description, case description) -> uses a non-CONTROLLER output"""
    out = {}
    for path in glob.glob(os.path.join(of13, "**", "*.json"), recursive=True):
        doc = json.load(open(path))
        fdesc = None
        for item in doc:
            if isinstance(item, str):
                fdesc = item
            else:
                out[(fdesc, item.get("description"))] = uses_port_output(item)
    return out


def main():
    d, label = sys.argv[1], sys.argv[2]
    strict = None
    if "--strict-from-maxlen0" in sys.argv:
        strict = strict_map(sys.argv[sys.argv.index("--strict-from-maxlen0") + 1])
    tot = collections.Counter()
    for path in sorted(glob.glob(os.path.join(d, label + "-*.log"))):
        group = os.path.basename(path)[len(label) + 1:-4]
        cases = parse(path)
        ok = sum(1 for c in cases if c[2] == "OK")
        print(f"## {label} {group}: {len(cases)} cases, OK {ok}, ERROR {len(cases) - ok}")
        tot["cases"] += len(cases)
        tot["ok"] += ok
        causes = collections.Counter(cause(c[3]) for c in cases if c[2] == "ERROR")
        for c, n in causes.most_common():
            print(f"  {n:4d}  {c}")
        if strict is not None:
            sok = 0
            for f, t, r, _ in cases:
                key = (f, t)
                if key not in strict:
                    print(f"  ?? no test file entry for {key}")
                if r == "OK" and not strict.get(key, True):
                    sok += 1
            print(f"  strict (unmodified files): OK {sok}, ERROR {len(cases) - sok}")
            tot["strict_ok"] += sok
    print(f"## {label} total: {tot['cases']} cases, OK {tot['ok']}, ERROR {tot['cases'] - tot['ok']}"
          + (f"; strict OK {tot['strict_ok']}" if strict is not None else ""))


if __name__ == "__main__":
    main()
