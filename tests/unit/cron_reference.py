#!/usr/bin/env python3
"""Compares cron_next (through build/tests/test_cron_oracle --stdin) with an
independent computation: its own reading of the expression rules in
README.md (Schedules) and Python's zoneinfo over the same tz database for
local times, gaps and overlaps.

usage: cron_reference.py [ORACLE_BINARY] [N_CASES] [SEED]
Exits 1 and prints the first differences when they disagree."""
import calendar
import datetime as dt
import random
import subprocess
import sys
from zoneinfo import ZoneInfo

MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
LIMITS = {"sec": (0, 59), "min": (0, 59), "hour": (0, 23), "dom": (1, 31), "mon": (1, 12), "dow": (0, 7)}
ZONES = ["America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kathmandu", "Pacific/Chatham",
         "America/Sao_Paulo", "Europe/Berlin", "America/Santiago", "Europe/Dublin", "Pacific/Apia",
         "Africa/Casablanca", "Asia/Gaza", "America/Nuuk", "Antarctica/Troll", "Asia/Tehran",
         "Pacific/Kiritimati", "America/St_Johns", "Europe/Moscow", "America/Havana", "Asia/Jerusalem",
         "Australia/Sydney", "Pacific/Norfolk", "America/Caracas", "Europe/Lisbon", "UTC"]


def value(f, tok):
    if tok[0].isdigit():
        v = int(tok)
        lo, hi = LIMITS[f]
        assert lo <= v <= hi, (f, tok)
        return v
    names = MONTHS if f == "mon" else DAYS
    return names.index(tok.upper()) + (1 if f == "mon" else 0)


def parse_field(f, text):
    s = dict(set=set(), last=False, dow_last=set(), nth=set(), any=text[0] in "*?")
    for it in text.split(","):
        if f == "dom" and it.upper() == "L":
            s["last"] = True
            continue
        if f == "dow" and "#" in it:
            d, k = it.split("#")
            s["nth"].add((value(f, d) % 7, int(k)))
            continue
        if f == "dow" and len(it) >= 2 and it[-1] in "Ll":
            s["dow_last"].add(value(f, it[:-1]) % 7)
            continue
        step, slash = 1, "/" in it
        if slash:
            it, st = it.split("/")
            step = int(st)
        lo, hi = LIMITS[f]
        if f == "dow":
            hi = 6
        if it in ("*", "?"):
            pass
        elif "-" in it:
            a, b = it.split("-")
            lo, hi = value(f, a), value(f, b)
        else:
            lo = value(f, it)
            if not slash:
                hi = lo
            elif f == "dow" and lo == 7:
                lo = 0  # 7/n: from Sunday, through 0-6 like 0/n
        for v in range(lo, hi + 1, step):
            s["set"].add(v % 7 if f == "dow" else v)
    return s


def parse(expr):
    macros = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
              "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
    expr = macros.get(expr.strip().lower(), expr)
    parts = expr.split()
    if len(parts) == 5:
        parts = ["0"] + parts
    return {f: parse_field(f, p) for f, p in zip(["sec", "min", "hour", "dom", "mon", "dow"], parts)}


def day_matches(c, y, m, d):
    dim = calendar.monthrange(y, m)[1]
    wd = (dt.date(y, m, d).weekday() + 1) % 7
    dom = d in c["dom"]["set"] or (c["dom"]["last"] and d == dim)
    dow = (wd in c["dow"]["set"] or (wd in c["dow"]["dow_last"] and d + 7 > dim)
           or (wd, (d - 1) // 7 + 1) in c["dow"]["nth"])
    if c["dom"]["any"] or c["dow"]["any"]:
        return dom and dow
    return dom or dow


def local_times(c, start_day):
    day = start_day
    hours, mins, secs = sorted(c["hour"]["set"]), sorted(c["min"]["set"]), sorted(c["sec"]["set"])
    while day.year < 9000:
        if day.month in c["mon"]["set"] and day_matches(c, day.year, day.month, day.day):
            for h in hours:
                for mi in mins:
                    for s in secs:
                        yield dt.datetime(day.year, day.month, day.day, h, mi, s)
        else:
            yield None  # a day without slots: lets the caller stop
        day += dt.timedelta(days=1)


def ts(d, z, fold):
    return int(d.replace(tzinfo=z, fold=fold).timestamp())


def exists(u, d, z):
    return dt.datetime.fromtimestamp(u, z).replace(tzinfo=None) == d


def instants_of(d, z, gap, ov):
    u0, u1 = ts(d, z, 0), ts(d, z, 1)
    us = sorted({u for u in (u0, u1) if exists(u, d, z)})
    if not us:
        if gap == 1:
            return []
        a, b = min(u0, u1), max(u0, u1)  # the offset changes in (a, b]
        oa = dt.datetime.fromtimestamp(a, z).utcoffset()
        while b - a > 1:
            mid = (a + b) // 2
            if dt.datetime.fromtimestamp(mid, z).utcoffset() == oa:
                a = mid
            else:
                b = mid
        return [(b, 1)]
    if len(us) == 1:
        return [(us[0], 0)]
    return [(us[0], 0), (us[1], 2)] if ov == 1 else [(us[0], 0)]


def reference(expr, zone, gap, ov, after_ms, count):
    c, z = parse(expr), ZoneInfo(zone)
    after = after_ms // 1000
    start = (dt.datetime(1970, 1, 1) + dt.timedelta(seconds=after) - dt.timedelta(days=2)).date()
    found = {}
    for d in local_times(c, start):
        if d is None:
            continue
        local = calendar.timegm(d.timetuple())
        if local > (max(found) if found else after) + 10 * 366 * 86400 + 86400:
            break  # none within 10 years: cron_next gives up there too
        for u, fl in instants_of(d, z, gap, ov):
            if u > after:
                found.setdefault(u, fl)
        got = sorted(found)
        if len(got) >= count and local > got[count - 1] + 15 * 3600 + 86400:
            break
    return [(u * 1000, found[u]) for u in sorted(found)[:count]]


def rand_field(r, f):
    lo, hi = LIMITS[f]
    if f == "dow":
        hi = 7

    def num(v):
        if f == "mon" and r.random() < 0.4:
            return r.choice([str.upper, str.lower, str.title])(MONTHS[v - 1])
        if f == "dow" and v < 7 and r.random() < 0.4:
            return r.choice([str.upper, str.lower, str.title])(DAYS[v])
        return str(v)

    def one():
        k = r.random()
        if k < 0.35:
            return num(r.randint(lo, hi))
        if k < 0.55:
            a = r.randint(lo, hi)
            b = r.randint(a, hi)
            return f"{num(a)}-{num(b)}" + (f"/{r.randint(1, hi - lo + 1)}" if r.random() < 0.4 else "")
        if k < 0.7:
            return f"*/{r.randint(1, hi - lo + 1)}"
        if k < 0.8 and f != "dow":
            return f"{num(r.randint(lo, hi))}/{r.randint(1, hi - lo + 1)}"
        if f == "dom" and k < 0.9:
            return "L"
        if f == "dow" and k < 0.85:
            return f"{num(r.randint(0, 7))}L"
        if f == "dow" and k < 0.95:
            return f"{num(r.randint(0, 7))}#{r.randint(1, 5)}"
        return num(r.randint(lo, hi))

    if r.random() < (0.5 if f in ("dom", "mon", "dow") else 0.15):
        return r.choice(["*", "?"]) if f in ("dom", "dow") else "*"
    items = [one() for _ in range(r.choice([1, 1, 1, 2, 3]))]
    if any(i[0] in "*?" for i in items[1:]):
        items = items[:1]
    return ",".join(items)


def rand_expr(r):
    if r.random() < 0.05:
        return r.choice(["@yearly", "@Monthly", "@weekly", "@daily", "@midnight", "@hourly"])
    # hours and minutes near the usual changes are favoured
    hour = r.choice([rand_field(r, "hour"), str(r.choice([0, 1, 2, 3, 23])), f"{r.randint(0, 3)}-{r.randint(3, 5)}"])
    minute = r.choice([rand_field(r, "min"), str(r.choice([0, 15, 30, 45])), "0,30", "*/15"])
    f = [minute, hour, rand_field(r, "dom"), rand_field(r, "mon"), rand_field(r, "dow")]
    if r.random() < 0.15:
        f.insert(0, r.choice(["0", "30", "*/20", "0,59"]))
    return " ".join(f)


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/tests/test_cron_oracle"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    r = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 20260229)
    p = subprocess.Popen([binary, "--stdin"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    bad = 0
    for i in range(n):
        expr, zone = rand_expr(r), r.choice(ZONES)
        year = r.choice([r.randint(1975, 2037), r.randint(2038, 2100), r.randint(2015, 2030)])
        # near a change of offset in that year, or anywhere
        z = ZoneInfo(zone)
        after = calendar.timegm((year, r.randint(1, 12), r.randint(1, 28), r.randint(0, 23), r.randint(0, 59), 0))
        if r.random() < 0.7:
            off0 = dt.datetime.fromtimestamp(after, z).utcoffset()
            for k in range(1, 400 * 24):
                if dt.datetime.fromtimestamp(after + k * 3600, z).utcoffset() != off0:
                    after += k * 3600 - r.randint(0, 3 * 86400)
                    break
        after_ms = after * 1000 + r.choice([0, 0, 999, 500])
        gap, ov, count = r.randint(0, 1), r.randint(0, 1), 12
        try:
            want = reference(expr, zone, gap, ov, after_ms, count)
        except AssertionError:
            continue
        p.stdin.write(f"N\t{expr}\t{zone}\t{gap}\t{ov}\t{after_ms}\t{count}\n")
        p.stdin.flush()
        line = p.stdout.readline().strip()
        if line.startswith("ERR"):
            print(f"MISMATCH {expr!r} {zone}: oracle says {line}")
            bad += 1
            continue
        got = [tuple(int(x) for x in tok.split(":")) for tok in line.split()]
        if [g[0] for g in got] != [w[0] for w in want] or any(
                g[1] != w[1] for g, w in zip(got, want) if w[1] != 1):
            bad += 1
            print(f"MISMATCH {expr!r} {zone} gap={gap} ov={ov} after_ms={after_ms}")
            fmt = lambda l: [f"{dt.datetime.fromtimestamp(u // 1000, dt.timezone.utc):%Y-%m-%dT%H:%M:%SZ}/{f}" for u, f in l]
            print("  service  ", fmt(got))
            print("  reference", fmt(want))
            if bad >= 10:
                break
    p.stdin.close()
    p.wait()
    print(f"{n} cases, {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
