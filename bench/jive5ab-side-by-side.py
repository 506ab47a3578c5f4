# The session of bench/jive5ab-side-by-side.sh (which starts the two daemons and calls this): the same
# Field-System-like command sequence to jive5ab and to `vlbiflow serve --dialect jive5ab`, replies side by
# side with a verdict per line, then each recording checked by `vlbiflow check` and by both daemons'
# `scan_check?`, and a scan with garbage datagrams. Every wait is bounded. Arguments: see the .sh.
import glob
import json
import os
import socket
import subprocess
import sys
import time

(BIN, SCRATCH, J5_PORT, VF_PORT, J5_DATA, VF_DATA, SECS, SCANS, PPS, JIVE5AB, J5_PID) = sys.argv[1:]
SCANS, PPS = int(SCANS), int(PPS)
TIMEOUT = 20.0
NO_REPLY = f"(no reply within {TIMEOUT:.0f} s)"
# The Field System's FlexBuff set-up (fb_mode for VDIF, 8000-byte payloads): udpsnor, not udps (jive5ab
# 3.1.0 hangs in `record = off` after a udps recording; docs/jive5ab-dialect.md says why).
PROTOCOL = "udpsnor : 64000000 : 256000000 : 4"
MODE = "VDIF_8000-2048-16-2"
FRAME = 8032
SCAN_NAME = "r41234_wf_no{:04d}"


class Side:
    """One command connection: a statement out, one reply line back (bounded)."""

    def __init__(self, name, port):
        self.name, self.port, self.buf = name, int(port), b""
        for _ in range(300):
            try:
                self.s = socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT)
                return
            except OSError:
                time.sleep(0.1)
        sys.exit(f"bench: nothing listens on {port} ({name})")

    def ask(self, line):
        self.s.sendall((line + " ;\n").encode())
        deadline = time.time() + TIMEOUT
        while b"\n" not in self.buf:
            left = deadline - time.time()
            if left <= 0:
                return NO_REPLY
            self.s.settimeout(left)
            try:
                more = self.s.recv(65536)
            except (TimeoutError, socket.timeout):
                return NO_REPLY
            if not more:
                return "(connection closed)"
            self.buf += more
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode(errors="replace").rstrip("\r")


def parse(reply):
    # Lenient, as the Field System parses: code after the first '='/'?', fields split on ':' and trimmed.
    body = reply.strip()
    if not body.startswith("!"):
        return None
    body = body[1:].rstrip(";")
    op = min([i for i in (body.find("="), body.find("?")) if i >= 0], default=-1)
    if op < 0:
        return None
    parts = [p.strip() for p in body[op + 1:].split(":")]
    return parts[0], parts[1:]


# Keyword -> (the fields, counted from 1 after the return code, whose values may differ; None: any) and
# why they differ by design. Return codes and the number of fields must agree.
EXPECTED = {
    "version": (None, "different software: program name, version and build"),
    "dts_id": ({2}, "different software and build date"),
    "rtime": ({1, 2, 3}, "the free space of each side's own disks"),
    "net_port": ({1}, "each side listens on its own data port"),
    "disk2file": ({2}, "each side writes its own file"),
    "dir_info": ({2, 3}, "each side's own disks"),
    "record": ({4}, "byte count: jive5ab counts each datagram with its 8-byte sequence number, vlbiflow "
                    "the frames it stored (and each side's own losses)"),
    "evlbi": ({2, 4}, "each side's own datagram counts and losses"),
    "scan_check": ({5, 6, 7, 8}, "jive5ab reads the first megabyte of the scan (`***`/`?` where it cannot "
                   "tell the frame rate); vlbiflow's fields come from the scan's metadata "
                   "(docs/jive5ab-dialect.md)"),
    "scan_set": ({1, 4}, "field 1: jive5ab's index is std::distance from the scan to rbegin() of its "
                 "newest-first std::list, which runs past the list's end (src/mk5command/scan_set_vbs.cc:60): "
                 "N-i+2 for scan i of N (0 for the first), vlbiflow gives i-1; field 4: the scan's length on "
                 "each side's disks (each side's own losses)"),
}

rows = []
j5 = vf = None


def verdict_of(cmd, a, b, reason, diverge):
    pa, pb = parse(a), parse(b)
    kw = cmd.split("=")[0].split("?")[0].strip()
    if NO_REPLY in (a, b):
        return "DIFFERS (no reply)"
    if pa is not None and pa == pb:
        return "same"
    if diverge:
        return "expected (behaviour): " + diverge
    if pa is None or pb is None or pa[0] != pb[0] or len(pa[1]) != len(pb[1]):
        return "DIFFERS"
    fields, why = (None, reason) if reason else EXPECTED.get(kw, (set(), None))
    at = [i + 1 for i, (x, y) in enumerate(zip(pa[1], pb[1])) if x != y]
    if not why or (fields is not None and not set(at) <= fields):
        return "DIFFERS"
    return f"expected (field {','.join(map(str, at))}): {why}"


def both(cmd, j5cmd=None, vfcmd=None, reason=None, diverge=None):
    a = j5.ask(j5cmd or cmd)
    b = vf.ask(vfcmd or cmd)
    v = verdict_of(cmd, a, b, reason, diverge)
    rows.append((cmd, a, b, v))
    return a, b


def note(text):
    rows.append((text, "", "", ""))


def gen(port, start, secs):
    """`vlbiflow gen` of SECS x PPS frames stamped from START to one daemon's data port. The two cores
    here cannot send 2 x 2 Gb/s at once (gen to two destinations fell behind its schedule), so each
    scan's stream goes to jive5ab and then, with the same time stamps and payload, to vlbiflow: both
    daemons record the same frames, each at the full rate."""
    args = [BIN, "gen", "--dest", f"127.0.0.1:{port}", "--psn", "--frame-size", str(FRAME), "--channels", "16",
            "--pps", str(PPS), "--count", str(int(PPS * float(secs))), "--start", start, "--threads", "1",
            "--json", "-q"]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stamp():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def gen_result(p):
    out, err = p.communicate(timeout=60 + float(SECS))
    if p.returncode != 0:
        sys.exit(f"bench: gen failed: {err}")
    return json.loads(out)


def record_bytes(side):
    p = parse(side.ask("record?"))
    try:
        return int(p[1][3])
    except (TypeError, IndexError, ValueError):
        return -1


def garbage(port, seed):
    """1000 datagrams of a frame's size (8-byte sequence number + 8032) with random content, then one of
    1000 bytes: every one of them is not a frame of the stream."""
    import random
    rnd = random.Random(seed)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(1000):
        s.sendto(rnd.randbytes(8 + FRAME), ("127.0.0.1", int(port)))
    s.sendto(rnd.randbytes(1000), ("127.0.0.1", int(port)))
    s.close()


j5, vf = Side("jive5ab", J5_PORT), Side("vlbiflow", VF_PORT)
t_start = time.time()
both("version?")
both("dts_id?")
both("status?")
both(f"mode = {MODE}")
both(f"net_protocol = {PROTOCOL}")
both("net_port = PORT", f"net_port = {J5_DATA}", f"net_port = {VF_DATA}")
both("mtu = 9000")
both("set_disks = DISKS", f"set_disks = {SCRATCH}/j5/disk*", f"set_disks = {SCRATCH}/vf/disk*")
both("mode?")
both("net_protocol?")
both("net_port?", reason="each side listens on its own data port")
both("rtime?")

sent = {}
gens = []
for n in range(1, SCANS + 1):
    name = SCAN_NAME.format(n)
    note(f"(scan {n} of {SCANS}: {name}, {SECS} s of frames at {PPS} frames/s, to jive5ab then the same to vlbiflow)")
    both(f"record = on : {name}")
    both("record?")
    start = stamp()
    for port in (J5_DATA, VF_DATA):
        g = gen_result(gen(port, start, SECS))
        gens.append(g)
    sent[name] = g["frames"]
    # The last datagrams are in both sockets once gen returns; wait (bounded) until both byte counts stand.
    last = None
    for _ in range(50):
        now = (record_bytes(j5), record_bytes(vf))
        if now == last:
            break
        last = now
        time.sleep(0.1)
    both("record?")
    both("evlbi?")
    both("status?")
    both("record = off")
    both("scan_check?")
    both("status?")

# Status and replay of one scan.
pick = SCAN_NAME.format(min(3, SCANS))
note(f"(after the scans: {pick} replayed with disk2file)")
both(f"scan_set = {pick}")
both("scan_set?")
both("scan_check?")
both("dir_info?")
both("rtime?")
both("transfermode?")
both("disk2file = FILE : : : w", f"disk2file = {SCRATCH}/j5.out : : : w", f"disk2file = {SCRATCH}/vf.out : : : w")
deadline = time.time() + 120
while time.time() < deadline:
    a, b = j5.ask("disk2file?"), vf.ask("disk2file?")
    if "inactive" in a and "inactive" in b:
        break
    time.sleep(0.2)
both("disk2file?")
both("record = bogus")
both("bank_set?")
both("runtime?")
both("error?")

# The garbage run: 1000 garbage datagrams and one of the wrong size into both recording ports mid-scan.
gname = SCAN_NAME.format(SCANS + 1)
note(f"(garbage run: {gname}, {max(float(SECS), 2.0)} s from gen; 1000 garbage datagrams of a frame's size and one of "
     "1000 bytes sent into each data port once it counts bytes)")
both(f"record = on : {gname}")
start = stamp()
j5_before = j5_after = -1
for side, port in ((j5, J5_DATA), (vf, VF_DATA)):
    g = gen(port, start, max(float(SECS), 2.0))
    for _ in range(100):
        if record_bytes(side) > 0:
            break
        time.sleep(0.05)
    if side is j5:
        j5_before = record_bytes(j5)
    garbage(port, 1)
    g = gen_result(g)
    gens.append(g)
    if side is j5:
        time.sleep(0.5)
        j5_after = record_bytes(j5)
sent[gname] = g["frames"]
JIVE5AB_ENDED = ("jive5ab's reader ended at the 1000-byte datagram and with it the recording "
                 "(its log, below); vlbiflow dropped the 1001 datagrams and recorded on")
both("record?", diverge=JIVE5AB_ENDED)
both("evlbi?")
both("record = off", diverge=JIVE5AB_ENDED)
both("scan_check?", diverge="jive5ab's current scan is still the one before: its recording of "
     f"{gname} ended without record = off")
both("error?")
t_session = time.time() - t_start


def check(disks, name):
    r = subprocess.run([BIN, "check", "--json", "-q", "--frame-rate", str(PPS), "--disk", disks, name],
                       capture_output=True, text=True, timeout=300)
    try:
        d = json.loads(r.stdout)
    except ValueError:
        return {"verdict": f"(check failed: {r.stderr.strip()[-200:]})"}
    return d


# Each recording checked by `vlbiflow check`, and by both daemons' scan_check? (each reading the other's
# disks too: jive5ab's set_disks on vlbiflow's mounts, vlbiflow's on jive5ab's).
checks = []
for n in range(1, SCANS + 2):
    name = SCAN_NAME.format(n)
    cj = check(f"{SCRATCH}/j5/disk*", name)
    cv = check(f"{SCRATCH}/vf/disk*", name)
    checks.append((name, cj, cv))

# jive5ab's scan_check? on its own recordings and on vlbiflow's (its set_disks on vlbiflow's mounts), and
# vlbiflow's on its own. (vlbiflow's scan_check? answers from the metadata it writes beside its own
# recordings; jive5ab's recordings are checked by `vlbiflow check` above.)
cross = {}
for who, side, disks in (("j5_on_j5", j5, "j5"), ("j5_on_vf", j5, "vf"), ("vf_on_vf", vf, "vf")):
    side.ask(f"set_disks = {SCRATCH}/{disks}/disk*")
    for n in range(1, SCANS + 2):
        name = SCAN_NAME.format(n)
        side.ask(f"scan_set = {name}")
        cross[(who, name)] = side.ask("scan_check?")

# ---- the report ----
short = {"j5": "jive5ab's", "vf": "vlbiflow's"}
print(f"# jive5ab side by side: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
print(f"# jive5ab: {JIVE5AB}; vlbiflow: {BIN}; {SCANS} scans of {SECS} s, VDIF {FRAME}-byte frames at "
      f"{PPS} frames/s ({PPS * FRAME * 8 / 1e9:.3f} Gb/s) with an 8-byte sequence number, `vlbiflow gen` "
      f"sending each scan's frames to jive5ab, then the same frames to vlbiflow; session {t_session:.0f} s")
for cmd, a, b, v in rows:
    print(f"> {cmd}")
    if v:
        print(f"  jive5ab : {a}")
        print(f"  vlbiflow: {b}")
        print(f"  verdict : {v}")

print("# vlbiflow check of each recording (frames stored / missing / invalid / garbage bytes, verdict) against gen's frames")
vf_exact = True
for name, cj, cv in checks:
    def s(c):  # noqa: E306
        return (f"{c.get('frames', '-')} / {c.get('missing', '-')} / {c.get('invalid', '-')} / "
                f"{c.get('garbage_bytes', '-')}, {c.get('verdict')}")
    print(f"  {name}: sent {sent.get(name)}; jive5ab's: {s(cj)}; vlbiflow's: {s(cv)}")
    vf_exact &= cv.get("frames") == sent.get(name) and cv.get("missing") == 0
rates = [g["achieved_bps"] for g in gens]
print(f"# gen per scan and daemon: {min(rates) / 1e9:.3f} to {max(rates) / 1e9:.3f} Gb/s achieved; "
      f"cannot keep up in {sum(1 for g in gens if g.get('cannot_keep_up'))} of {len(gens)} runs")
print("# scan_check? of each recording: jive5ab's on its own and on vlbiflow's, vlbiflow's on its own")
same_check = 0
for n in range(1, SCANS + 2):
    name = SCAN_NAME.format(n)
    a, b, c = cross[("j5_on_j5", name)], cross[("j5_on_vf", name)], cross[("vf_on_vf", name)]
    pa, pb, pc = parse(a), parse(b), parse(c)
    same = pb is not None and pb == pc
    same_check += same
    print(f"  {name}: jive5ab on jive5ab's : {a}")
    print(f"  {'':16s}  jive5ab on vlbiflow's: {b}")
    print(f"  {'':16s}  vlbiflow on its own  : {c}")
    print(f"  {'':16s}  jive5ab and vlbiflow on vlbiflow's recording: {'same' if same else 'differ'}; "
          f"jive5ab on both recordings: {'same' if parse(a) == pb else 'differ'}")
sizes = [os.path.getsize(f"{SCRATCH}/{n}.out") if os.path.exists(f"{SCRATCH}/{n}.out") else -1 for n in ("j5", "vf")]
print(f"# disk2file of {pick}: jive5ab {sizes[0]} bytes, vlbiflow {sizes[1]} bytes")
rejected = "?"
for meta in glob.glob(f"{SCRATCH}/vf/disk*/{gname}.vlbiflow.json"):
    with open(meta) as mf:
        rejected = sum(st["counters"]["rejected"] for st in json.load(mf)["streams"])
    break
print(f"# garbage run: jive5ab's record? byte count {j5_before} before the garbage, {j5_after} after gen "
      f"ended; vlbiflow stored {checks[-1][2].get('frames')} of the {sent[gname]} frames gen sent, "
      f"{checks[-1][2].get('missing')} missing, {rejected} datagrams rejected (its metadata)")
log = open(f"{SCRATCH}/jive5ab.log", errors="replace").read().splitlines()
for line in log:
    if "error" in line.lower() or "fails" in line:
        print(f"  jive5ab log: {line}")
bad = sum(1 for r in rows if r[3].startswith("DIFFERS"))
print(f"# {sum(1 for r in rows if r[3])} commands: {sum(1 for r in rows if r[3] == 'same')} same, "
      f"{sum(1 for r in rows if r[3].startswith('expected'))} expected differences, {bad} DIFFERS; "
      f"vlbiflow's recordings {'all exact' if vf_exact else 'NOT all exact'}; scan_check? of jive5ab and "
      f"vlbiflow on vlbiflow's recordings the same for {same_check} of {SCANS + 1}")
sys.exit(1 if bad or not vf_exact else 0)
