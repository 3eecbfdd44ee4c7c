"""The transport view (Profiler(ucx=True)): real mpiexec runs of
tests/_ucx_app.py through MPICH's ch4:ucx, its tables parsed, its section
codec, its text table and its part of the report in a real headless
Chromium. docs/mpi.md, "Transports"."""
import ctypes
import importlib.util
import os
import subprocess
import sys

import pytest
from _browser import Browser

import tinyprof
from tinyprof.converters import ConvertError
from tinyprof.errors import FormatError
from tinyprof.format.mpi_section import encode, parse
from tinyprof.runtime import capture
from tinyprof.views import mpi_text, report_page

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # tests/
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
needs_mpi = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None or not os.path.exists(MPIEXEC),
    reason="needs mpi4py and mpiexec next to the Python executable (pip install mpi4py mpich)")

SMALL, LARGE = 64, 800_000


def run(tmp_path, nranks=3, ucx=True, snapshots=False, **env):
    """Run the app; its profile and standard error."""
    out = tmp_path / "prof"
    proc = subprocess.run([MPIEXEC, "-n", str(nranks), sys.executable, os.path.join(HERE, "_ucx_app.py"),
                           str(out), "1" if ucx else "0", "1" if snapshots else "0"],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    if proc.returncode and env.get("UCX_TLS") and "Destination is unreachable" in proc.stderr:
        pytest.skip(f"UCX_TLS={env['UCX_TLS']}: MPI cannot start here (no such device but loopback)")
    assert proc.returncode == 0, proc.stderr
    return tinyprof.read(str(out)), proc.stderr


def rows(prof, callpath, rank):
    t = prof.transport
    return t[t.callpath.map(lambda path: path == (callpath,)) & (t["rank"] == rank)].sort_values("ucp_op")


@pytest.fixture(scope="module")
def nolocal(tmp_path_factory):
    """3 ranks through UCX (MPIR_CVAR_NOLOCAL=1): its profile."""
    if importlib.util.find_spec("mpi4py") is None or not os.path.exists(MPIEXEC):
        pytest.skip("needs mpi4py and mpiexec next to the Python executable")
    return run(tmp_path_factory.mktemp("ucx"), MPIR_CVAR_NOLOCAL="1")[0]


def test_eager_small_rendezvous_large_counted_where_posted(nolocal):
    prof = nolocal
    assert prof.ucx == {0: "used", 1: "used", 2: "used"}     # rank 2: the barrier's messages
    small = rows(prof, "small", 0)
    assert small[["op", "ucp_op", "calls", "bytes"]].values.tolist() == \
        [["Send", "tag_send", 10, 10 * SMALL]]
    assert small.protocol.iloc[0].startswith("eager"), small
    large = rows(prof, "large", 0)
    assert large[["op", "ucp_op", "calls", "bytes"]].values.tolist() == \
        [["Send", "tag_send", 3, 3 * LARGE]]
    assert large.protocol.iloc[0].startswith("rendezvous"), large
    assert small.transport.iloc[0] and large.transport.iloc[0]
    # receives: counted at completion with the length received, no protocol (the sender's choice)
    assert rows(prof, "small", 1)[["op", "ucp_op", "protocol", "calls", "bytes"]].values.tolist() == \
        [["Recv", "tag_recv", "", 10, 10 * SMALL]]
    assert rows(prof, "large", 1)[["op", "calls", "bytes"]].values.tolist() == [["Recv", 3, 3 * LARGE]]
    # an Irecv completed by a Wait in another region stays the Irecv's, in its region
    assert rows(prof, "post", 1)[["op", "ucp_op", "calls", "bytes"]].values.tolist() == \
        [["Irecv", "tag_recv", 1, LARGE]]
    post = rows(prof, "post", 0)
    assert post[["op", "calls", "bytes"]].values.tolist() == [["Isend", 1, LARGE]]
    assert post.protocol.iloc[0].startswith("rendezvous")
    assert rows(prof, "wait", 0).empty and rows(prof, "wait", 1).empty
    # one-sided: counted where made, under the MPI call that made it, with no protocol
    # (UCX keeps RMA selections per remote key, which no public call prints)
    rma = rows(prof, "rma", 0)
    assert rma[rma.ucp_op.isin(["put", "get"])][["op", "ucp_op", "protocol", "calls", "bytes"]].values.tolist() \
        == [["Get", "get", "", 1, SMALL], ["Put", "put", "", 2, SMALL + LARGE]]
    sync = rows(prof, "sync", 0)
    assert sync[["op", "ucp_op", "calls", "bytes"]].values.tolist() == \
        [["Ssend", "tag_send_sync", 2, 2 * SMALL]]
    assert sync.protocol.iloc[0] != ""
    # what the application sent is what the other rank received
    t = prof.transport
    # the window's set-up and free (Win_allocate, Win_free) send MPI's own messages
    mine = t[t.callpath.map(bool) & (t.op != "") & ~t.op.str.startswith("Win_")]
    assert mine[mine.ucp_op.str.startswith("tag_send")].bytes.sum() == \
        mine[mine.ucp_op == "tag_recv"].bytes.sum() == 10 * SMALL + 4 * LARGE + 2 * SMALL
    # tinyprof's own flush traffic is not there: all that is outside the regions is the barrier
    assert set(t[~t.callpath.map(bool)].op) == {"Barrier"}


@needs_mpi
def test_snapshots_and_their_deltas_carry_it(tmp_path):
    prof, _ = run(tmp_path, MPIR_CVAR_NOLOCAL="1", snapshots=True)
    out = str(tmp_path / "prof")
    assert tinyprof.snapshots(out) == [1, 2]
    first, second = (tinyprof.read(out, snapshot=k) for k in (1, 2))
    assert {p[0] for p in first.transport.callpath if p} == {"small", "large"}
    assert rows(first, "large", 0)[["calls", "bytes"]].values.tolist() == [[3, 3 * LARGE]]
    key = ["callpath", "rank", "op", "ucp_op", "protocol", "transport"]
    mine = prof.transport[prof.transport.callpath.map(bool)].sort_values(key).reset_index(drop=True)
    again = second.transport[second.transport.callpath.map(bool)].sort_values(key).reset_index(drop=True)
    assert mine.equals(again)           # all the application's operations were in the last snapshot
    # rank 2 takes part in the window's collectives only, after the first snapshot
    assert first.ucx == {0: "used", 1: "used", 2: "unused"}
    assert second.ucx == prof.ucx == {0: "used", 1: "used", 2: "used"}
    # tinyprof's own traffic (the snapshots', its set-up progressed by the application's
    # calls) is in none: only the application's regions and its final barrier
    assert set(prof.transport[~prof.transport.callpath.map(bool)].op) == {"Barrier"}
    assert set(first.transport.op) == {"Send", "Recv"}


@needs_mpi
def test_tcp_reported(tmp_path):
    prof, _ = run(tmp_path, nranks=2, MPIR_CVAR_NOLOCAL="1", UCX_TLS="tcp,self")
    sends = prof.transport[prof.transport.ucp_op == "tag_send"]
    assert len(sends) and all(t.startswith("tcp/") for t in sends.transport), sends
    assert rows(prof, "large", 0).protocol.iloc[0].startswith("rendezvous")


@needs_mpi
def test_mpich_shared_memory_is_said_not_ucx(tmp_path):
    prof, _ = run(tmp_path, nranks=2)           # without MPIR_CVAR_NOLOCAL: MPICH's own shm
    assert prof.ucx == {0: "unused", 1: "unused"}
    assert prof.transport.empty
    assert prof.mpi[prof.mpi.op == "Send"].calls.sum() == 10 + 3 + 2 * 0   # counted as ever
    text = subprocess.run([sys.executable, "-m", "tinyprof.cli", "mpi", str(tmp_path / "prof"), "--by",
                           "transport"], capture_output=True, text=True)
    assert text.returncode == 0 and "MPIR_CVAR_NOLOCAL=1" in text.stdout


@needs_mpi
def test_off_records_no_transport(tmp_path):
    prof, _ = run(tmp_path, nranks=2, ucx=False, MPIR_CVAR_NOLOCAL="1")
    assert prof.ucx == {} and prof.transport.empty and not prof.mpi.empty
    text = subprocess.run([sys.executable, "-m", "tinyprof.cli", "mpi", str(tmp_path / "prof"), "--by",
                           "transport"], capture_output=True, text=True)
    assert text.returncode != 0 and "holds no transport view" in text.stderr
    assert "Traceback" not in text.stderr


# ucp_ep_print_info's table lines, as UCX 1.20 prints them here (plus a second lane and a bad row)
TABLES = open(os.path.join(HERE, "golden", "ucx_tables.txt")).read()


FAST, MULTI, REPLY, NONCONTIG = 16, 32, 64, 128        # TP_UCP_* of native/include/tinyprof/tinyprof_mpi.h
needs_library = pytest.mark.skipif(not os.path.exists(capture.LIBRARY), reason="libtinyprof_mpi.so not built")


def library():
    return capture._check(capture._bind(ctypes.CDLL(capture.LIBRARY)))


def classify(tables, code, size):
    """(protocol, transport) libtinyprof_mpi reads for operation ``code`` of
    ``size`` bytes in ``tables`` (tinyprof_ucx_classify)."""
    protocol, transport = ctypes.create_string_buffer(256), ctypes.create_string_buffer(256)
    got = library().tinyprof_ucx_classify(tables.encode(), code, size, protocol, transport, 256)
    assert got == (max(len(protocol.value), len(transport.value)) + 1 if protocol.value or transport.value else 0)
    return protocol.value.decode(), transport.value.decode()


@needs_library
def test_tables_classify_by_size_and_variant():
    assert classify(TABLES, 0, 0) == ("eager short", "sysv/memory")
    assert classify(TABLES, 0, 92) == ("eager short", "sysv/memory")
    assert classify(TABLES, 0, 93) == ("eager copy-in copy-out", "sysv/memory")
    assert classify(TABLES, 0, 5029) == ("rendezvous zero-copy read from remote", "cma/memory")
    assert classify(TABLES, FAST, 262143) == ("multi-frag eager copy-in copy-out", "sysv/memory")
    assert classify(TABLES, FAST, 256 * 1024) == \
        ("rendezvous zero-copy read from remote", "rc/mlx5_0:1, rc/mlx5_1:1")
    assert classify(TABLES, 7, 10) == ("short", "self/memory")             # get: "into"
    assert classify(TABLES, 7, 2**20) == ("zero-copy", "cma/memory")         # 1M: binary units
    assert classify(TABLES, 7, 2**20 + 1) == ("", "")
    assert classify(TABLES, 6, 5805) == ("zero-copy", "cma/memory")         # put: "... to host"
    assert classify(TABLES, 4 | REPLY | FAST, 84) == ("short", "sysv/memory")
    assert classify(TABLES, 4, 84) == ("", "")      # no plain AM table printed
    assert classify(TABLES, FAST, 100) == ("", "")     # no row: not known, not guessed
    assert classify(TABLES, 2, 10) == ("", "")         # receives
    assert classify(TABLES, NONCONTIG, 10) == ("", "")
    assert classify(TABLES, MULTI, 6031) == ("rendezvous zero-copy read from remote", "cma/memory")
    assert classify(TABLES, 1, 10) == ("", "")         # no sync-send table printed
    assert [library().tinyprof_ucx_op_name(c).decode() for c in (0, 1 | FAST, 6, 7)] == \
        ["tag_send", "tag_send_sync", "put", "get"]


@needs_library
def test_classify_truncates_and_says_so():
    protocol, transport = ctypes.create_string_buffer(6), ctypes.create_string_buffer(6)
    lib = library()
    assert lib.tinyprof_ucx_classify(TABLES.encode(), 0, 0, protocol, transport, 6) == len("eager short") + 1
    assert (protocol.value, transport.value) == (b"eager", b"sysv/")
    assert lib.tinyprof_ucx_classify(None, 0, 0, protocol, transport, 6) == 0
    assert (protocol.value, transport.value) == (b"", b"")
    assert lib.tinyprof_ucx_op_name(9 | FAST).decode() == "ucp9"


def test_section_round_trip_and_errors():
    transport = [(1, 0, "Send", "tag_send", "eager short", "tcp/eth0", 10, 640),
                 (0, -1, "", "tag_recv", "", "", 1, 8)]
    payload = encode([], [], [], transport, [(1, "used"), (0, "unused")])
    assert payload.endswith(b"transport 2\n0|||tag_recv|||1|8\n1|0|Send|tag_send|eager short|"
                            b"tcp/eth0|10|640\nucx 2\n0|unused\n1|used\n")
    s = parse(payload, "f", 1, 1, 0, 2, 2)
    assert s.transport == sorted(transport) and s.ucx == [(0, "unused"), (1, "used")]
    assert encode([], [], []) == b"comms 0\nops 0\npeers 0\n"      # without the view: as before
    send = b"1|0|Send|tag_send|eager short|tcp/eth0|10|640"
    for old, new, problem in (
            (b"transport 2", b"ucx 2", "data after the peers rows"),
            (b"1|used\n", b"1|used\nmore\n", "data after the ucx rows"),
            (send, b"1|0|Send|tag_send|eager|tcp|0|640", "bad calls"),
            (send, b"1|0|Send|Tag|eager|tcp|1|640", "bad UCP operation"),
            (send, b"1|0|send|tag_send|eager|tcp|1|640", "bad operation name"),
            (send, b"9|0|Send|tag_send|eager|tcp|1|640", "bad rank"),
            (send, b"1|0|Send|tag_send|eager\x7f|tcp|1|640", "bad protocol or transport"),
            (b"1|used", b"1|maybe", "bad UCX state"),
            (b"0|unused\n1|used", b"1|used\n0|unused", "not in rank order")):
        assert old in payload
        with pytest.raises(FormatError, match=problem):
            parse(payload.replace(old, new), "f", 1, 1, 0, 2, 2)


def test_text_table(nolocal):
    text = mpi_text.transport(nolocal, ["large"], by_rank=True)
    lines = text.splitlines()
    assert lines[0] == "ucx: UCX carried the MPI traffic of rank(s) 0-2"
    assert lines[1].split() == ["callpath", "rank", "op", "ucp", "op", "protocol", "transport", "calls",
                                "bytes", "avg", "bytes/call"]
    assert lines[2].split()[:4] == ["large", "0", "Send", "tag_send"] and "rendezvous" in lines[2]
    assert lines[2].split()[-3:] == ["3", "2400000", "800000.0"]
    assert lines[3].split() == ["large", "1", "Recv", "tag_recv", "(by", "sender)", "-", "3", "2400000",
                                "800000.0"]
    assert len(lines) == 4
    with pytest.raises(ConvertError, match="no callpath"):
        mpi_text.transport(nolocal, ["nowhere"])


def test_report_shows_it(nolocal, tmp_path):
    pytest.importorskip("plotly")
    data = report_page.build(nolocal)["mpi"]["transport"]
    assert data["states"] == {"used": [0, 1, 2]}
    t = nolocal.transport
    want = t.groupby(["op", "ucp_op", "protocol", "transport"])[["calls", "bytes"]].sum()
    got = {}
    for where, op, ucp, protocol, link, calls, nbytes in data["rows"]:
        acc = got.setdefault((op, ucp, protocol, link), [0, 0])
        acc[0] += calls
        acc[1] += nbytes
    assert got == {k: list(v) for k, v in zip(want.index, want.values.tolist())}
    assert data["rows"][0][0] == "large" and data["rows"][0][-1] == 3 * LARGE   # most bytes first
    out = tmp_path / "r.html"
    report_page.write(nolocal, out)
    with Browser(1500, 1400) as b:
        b.open(f"file://{out}")
        b.wait_for("document.body && document.body.dataset.ready === '1'", timeout=120)
        facts = b.evaluate("""(() => ({
            plots: [...document.querySelectorAll('#mpi .js-plotly-plot')].map(p => p.id),
            states: document.getElementById('transport-states').textContent,
            rows: [...document.querySelectorAll('#transport-table tbody tr')].map(
                r => [...r.children].map(c => c.textContent)),
            legend: document.getElementById('transport-bytes').data.map(d => d.name) }))()""")
        assert b.console == []
    assert {"transport-calls", "transport-bytes"} <= set(facts["plots"])
    assert facts["states"].startswith("UCX carried the MPI traffic of 3 rank(s).")
    assert len(facts["rows"]) == len(data["rows"])
    assert facts["rows"][0][:3] == ["large", "Recv", "tag_recv"]      # ties in key order, as the CLI
    assert any(n.startswith("rendezvous") for n in facts["legend"])
    assert any(n.startswith("eager") for n in facts["legend"])
