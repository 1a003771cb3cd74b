#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (corpus/<target>/) and dictionaries (dict/).

Small valid and near-valid inputs, one file each, named by what they hold. Run it from
anywhere after changing a format; it rewrites both folders' generated files:
    python3 tests/fuzz/make_corpus.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    folder = os.path.join(HERE, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def write_dict(target, entries):
    os.makedirs(os.path.join(HERE, "dict"), exist_ok=True)
    with open(os.path.join(HERE, "dict", target + ".dict"), "w") as f:
        f.write("# %s: libFuzzer dictionary (make_corpus.py writes it)\n" % target)
        for e in entries:
            if isinstance(e, str):
                e = e.encode()
            f.write('"%s"\n' % "".join("\\x%02x" % b if b < 0x20 or b > 0x7e or b in b'"\\'
                                       else chr(b) for b in e))


# ---- the TCPStore (store/tcp_store_protocol.h) ----
SET, GET, ADD, CSET, CHECK, WAIT, DELETE, NUM_KEYS, APPEND, MGET, MSET, PING, CANCEL = range(1, 14)
AUTH_HELLO, AUTH_PROOF = 14, 15


def b(data):
    data = data.encode() if isinstance(data, str) else data
    return struct.pack("<I", len(data)) + data


def keys(*ks):
    return struct.pack("<I", len(ks)) + b"".join(b(k) for k in ks)


def frame(code, request_id, payload=b"", version=1):
    return struct.pack("<IBBI", 6 + len(payload), version, code, request_id) + payload


def store():
    frames = {
        "ping": frame(PING, 1),
        "set_get": frame(SET, 1, b("k") + b("v")) + frame(GET, 2, b("k")),
        "add": frame(ADD, 1, b("counter") + struct.pack("<q", 5)) +
               frame(ADD, 2, b("counter") + struct.pack("<q", -7)),
        "compare_set": frame(CSET, 1, b("c") + b("") + b("x")) +
                       frame(CSET, 2, b("c") + b("x") + b("y")),
        "check_wait": frame(SET, 1, b("a") + b("1")) + frame(CHECK, 2, keys("a", "b")) +
                      frame(WAIT, 3, keys("a")),
        "parked_get_cancel": frame(GET, 7, b("missing")) + frame(CANCEL, 8, struct.pack("<I", 7)),
        "parked_multi_get": frame(MGET, 1, keys("x", "y")) + frame(SET, 2, b("x") + b("1")) +
                            frame(SET, 3, b("y") + b("2")),
        "delete_num_keys": frame(SET, 1, b("d") + b("1")) + frame(DELETE, 2, b("d")) +
                           frame(NUM_KEYS, 3),
        "append": frame(APPEND, 1, b("ap") + b("abc")) + frame(APPEND, 2, b("ap") + b("def")) +
                  frame(GET, 3, b("ap")),
        "multi_set": frame(MSET, 1, struct.pack("<I", 2) + b("m1") + b("1") + b("m2") + b("2")) +
                     frame(MGET, 2, keys("m1", "m2")),
        "bad_version": frame(PING, 1, version=9),
        "short_length": struct.pack("<I", 3) + b"\x01\x0c\x01",
        "truncated_payload": frame(SET, 1, b("key")),
        "trailing_bytes": frame(PING, 1, b"\x00"),
        "unknown_command": frame(99, 1),
        "huge_length": struct.pack("<IBBI", 0x7fffffff, 1, SET, 1),
        "auth_hello_open": frame(AUTH_HELLO, 1, b(bytes(range(16)))),
    }
    for name, data in frames.items():
        write("store_frames", name, b"\x00" + data)
    auth = {
        "auth_hello": frame(AUTH_HELLO, 1, b(bytes(range(16)))),
        "auth_hello_then_proof": frame(AUTH_HELLO, 1, b(bytes(range(16)))) +
                                 frame(AUTH_PROOF, 2, b(bytes(32))),
        "request_before_auth": frame(SET, 1, b("k") + b("v")),
        "big_frame_before_auth": frame(SET, 1, b("k") + b(bytes(300))),
    }
    for name, data in auth.items():
        write("store_frames", "token_" + name, b"\x01" + data)

    # fuzz_store_payloads: program length, program (op % 9: u8 u32 i64 key value message
    # keys count expect_end), then a frame.
    U8, U32, I64, KEY, VALUE, MESSAGE, KEYS, COUNT, END = range(9)
    programs = {
        "set": ([KEY, VALUE, END], frame(SET, 1, b("k") + b("v"))),
        "add": ([KEY, I64, END], frame(ADD, 1, b("c") + struct.pack("<q", -1))),
        "compare_set": ([KEY, VALUE, VALUE, END], frame(CSET, 1, b("c") + b("") + b("x"))),
        "keys": ([KEYS, END], frame(CHECK, 1, keys("a", "bb", "ccc"))),
        "multi_set": ([COUNT + 9 * 8, KEY, VALUE, KEY, VALUE, END],
                      frame(MSET, 1, struct.pack("<I", 2) + b("a") + b("1") + b("b") + b("2"))),
        "cancel": ([U32, END], frame(CANCEL, 1, struct.pack("<I", 3))),
        "error_reply": ([MESSAGE, END], frame(1, 5, b("no such key"))),
        "u8": ([U8, END], frame(CHECK, 1, b"\x01")),
        "key_over_limit": ([KEY], frame(SET, 1, b("k" * 65))),
        "count_too_big": ([COUNT + 9 * 4], frame(MGET, 1, struct.pack("<I", 1000))),
    }
    for name, (program, data) in programs.items():
        write("store_payloads", name, bytes([len(program)] + program) + data)
    names = ["\x01\x00\x00\x00", "\x00\x00\x00\x00", "\xff\xff\xff\xff", "\x06\x00\x00\x00\x01"]
    write_dict("store_frames", names + [chr(c) for c in range(1, 16)])


# ---- the transports' hellos (transport/tcp/hello_codec.h, transport/shm/hello_codec.h) ----
GROUP = 0x0123456789ABCDEF


def tcp_hello(magic=0x74644354, version=3, lane=0, nsocks=2, sender=1, receiver=0, nonce=GROUP):
    return struct.pack("<IHBBIIQ", magic, version, lane, nsocks, sender, receiver, nonce)


def hellos():
    write("tcp_hello", "valid", tcp_hello())
    write("tcp_hello", "valid_lane1_sender3", tcp_hello(lane=1, sender=3))
    write("tcp_hello", "bad_magic", tcp_hello(magic=0x12345678))
    write("tcp_hello", "old_version", tcp_hello(version=1))
    write("tcp_hello", "other_group", tcp_hello(nonce=GROUP + 1))
    write("tcp_hello", "nsocks_differ", tcp_hello(nsocks=4))
    write("tcp_hello", "lane_out_of_range", tcp_hello(lane=2))
    write("tcp_hello", "sender_out_of_range", tcp_hello(sender=7))
    write("tcp_hello", "with_expectations",
          tcp_hello(nsocks=4, sender=9, receiver=5, nonce=42) + struct.pack("<QBBBB", 42, 3, 5, 6, 4))

    def shm_hello(magic=0x4D536474, version=2, sender=1, receiver=0, nonce=GROUP, pid=1234,
                  capacity=1 << 16):
        return struct.pack("<IHHIIQIIQ", magic, version, 0, sender, receiver, nonce, pid, 0, capacity)

    write("shm_hello", "valid", shm_hello())
    write("shm_hello", "bad_magic", shm_hello(magic=0x74644354))
    write("shm_hello", "old_version", shm_hello(version=0))
    write("shm_hello", "other_group", shm_hello(nonce=7))
    write("shm_hello", "wrong_receiver", shm_hello(receiver=2))
    write("shm_hello", "with_expectations",
          shm_hello(sender=12, receiver=3, nonce=99) + struct.pack("<QBBB", 99, 3, 10, 5))
    write_dict("tcp_hello", [struct.pack("<I", 0x74644354), struct.pack("<Q", GROUP)])
    write_dict("shm_hello", [struct.pack("<I", 0x4D536474), struct.pack("<Q", GROUP)])


# ---- the transport core's wire (transport/core/wire.h) ----
M64 = (1 << 64) - 1
GOODBYE, ABORT, RV_READY, RV_DONE, RV_DATA = M64, M64 - 1, M64 - 2, M64 - 3, M64 - 4
RV_BIT = 1 << 62
DEVICE_BIT = 1 << 61  # with RV_BIT: a device payload (wire.h); a DeviceDescriptor follows
RV_PULL, RV_DEVICE = 1, 2
DEVICE_DESCRIPTOR_BYTES = 192
P2P = 1 << 63
RECV_EARLY, RECV_LATE, RECV_WITHDRAWN, SEND = 0, 1, 2, 3


def header(tag, nbytes, check=(0, 0)):
    return struct.pack("<QQQQ", tag, nbytes, check[0], check[1])


def message(tag, payload, check=(0, 0)):
    return header(tag, len(payload), check) + payload


# Collective 1's tag and the fingerprint the harness gives it (config bit 7: an f32
# all_reduce of 4, sum): w0 = kind 1 | dtype f32 (0) << 8 | (sum + 1) << 16 | (root + 1) << 32.
CHECKED = 128
COLL1 = 1 << 24
FP_ALL_REDUCE = (1 | 1 << 16, 4)
FP_BROADCAST = (2 | 1 << 32, 4)


def op(kind, nbytes, tag):
    return struct.pack("<BHQ", kind, nbytes, tag)


def wire_input(config, ops, streams):
    out = bytes([config, len(ops)]) + b"".join(ops)
    for s in streams[:-1]:
        out += struct.pack("<H", len(s))
    return out + b"".join(streams)


def rv_descriptor(rv_id, address=0, token_address=0, token=0, flags=0):
    return struct.pack("<QQQQQ", rv_id, address, token_address, token, flags)


def wire():
    bye = header(GOODBYE, 0)
    cases = {
        "posted_then_goodbye": wire_input(0, [op(RECV_EARLY, 4, 5)], [message(5, b"abcd") + bye]),
        "unexpected_then_late_recv":
            wire_input(0, [op(RECV_LATE, 3, 9)], [message(9, b"xyz") + bye]),
        "two_tags_out_of_order":
            wire_input(8 * 2, [op(RECV_EARLY, 2, 2), op(RECV_EARLY, 1, 1)],
                       [message(1, b"a") + message(2, b"bb") + bye]),
        "desync": wire_input(0, [op(RECV_EARLY, 8, 5)], [message(5, b"abcd") + bye]),
        "fingerprints_agree":
            wire_input(CHECKED, [op(RECV_EARLY, 16, COLL1)],
                       [message(COLL1, bytes(16), FP_ALL_REDUCE) + bye]),
        "fingerprint_mismatch":
            wire_input(CHECKED, [op(RECV_LATE, 16, COLL1)],
                       [message(COLL1, bytes(16), FP_BROADCAST) + bye]),
        # A root field of 0x80000000 (root + 1 as a peer sent it): decoding it for the
        # mismatch's message overflowed an int once (UBSan, found by this fuzzer in CI).
        "fingerprint_root_field_extreme":
            wire_input(CHECKED, [op(RECV_LATE, 16, COLL1)],
                       [message(COLL1, bytes(16), (2 | 0x80000000 << 32, 4)) + bye]),
        "stale_message":
            wire_input(CHECKED, [op(RECV_EARLY, 16, COLL1)],
                       [message(5, bytes(16), FP_ALL_REDUCE) + bye]),
        "withdrawn_recv": wire_input(0, [op(RECV_WITHDRAWN, 4, 5)], [message(5, b"abcd") + bye]),
        "abort": wire_input(0, [op(RECV_EARLY, 4, 5)], [message(ABORT, b"rank 1 gave up")]),
        "eof_mid_message": wire_input(0, [op(RECV_EARLY, 4, 5)], [header(5, 4) + b"ab"]),
        "goodbye_while_pending": wire_input(0, [op(RECV_EARLY, 4, 5)], [bye]),
        "bad_control_tag": wire_input(0, [op(RECV_EARLY, 4, 5)], [header(M64 - 10, 0)]),
        "huge_unexpected": wire_input(0, [op(RECV_LATE, 4, 5)], [header(5, 1 << 40)]),
        "rendezvous_posted":
            wire_input(0, [op(RECV_EARLY, 300, P2P | 1)],
                       [header(P2P | 1, RV_BIT | 300) + rv_descriptor(1) +
                        message(RV_DATA, struct.pack("<Q", 1) + bytes(300)) + bye]),
        # Two rendezvous under one id, each into a posted receive, neither copied out (no
        # read_remote): the second replaced the first receive, which hung (found by this
        # fuzzer); now a protocol error that fails both.
        "rendezvous_id_reused":
            wire_input(0, [op(RECV_EARLY, 300, P2P | 1), op(RECV_EARLY, 300, P2P | 1)],
                       [(header(P2P | 1, RV_BIT | 300) + rv_descriptor(7)) * 2 + bye]),
        "rendezvous_unexpected_pull":
            wire_input(64, [op(RECV_LATE, 300, P2P | 1)],
                       [header(P2P | 1, RV_BIT | 300) + rv_descriptor(1, flags=1) + bye]),
        # Descriptor flags that disagree with the header on the memory kind: a protocol
        # error, which must fail the posted receive too (it hung once).
        "rendezvous_kind_disagrees":
            wire_input(0, [op(RECV_EARLY, 300, P2P | 1)],
                       [header(P2P | 1, RV_BIT | 300) + rv_descriptor(1, flags=RV_DEVICE) + bye]),
        # A device payload on a channel that carries none, into a posted host receive and
        # as an unexpected message pulled at once.
        "device_rendezvous_posted":
            wire_input(0, [op(RECV_EARLY, 300, P2P | 1)],
                       [header(P2P | 1, RV_BIT | DEVICE_BIT | 300) +
                        rv_descriptor(1, flags=RV_DEVICE) + bytes(DEVICE_DESCRIPTOR_BYTES) + bye]),
        "device_rendezvous_unexpected_pull":
            wire_input(0, [op(RECV_LATE, 300, 5)],
                       [header(5, RV_BIT | DEVICE_BIT | 300) +
                        rv_descriptor(1, flags=RV_DEVICE | RV_PULL) +
                        bytes(DEVICE_DESCRIPTOR_BYTES) + bye]),
        "rendezvous_send_ready":
            wire_input(0, [op(SEND, 300, P2P | 2)],
                       [message(RV_READY, struct.pack("<Q", 0)) +
                        message(RV_READY, struct.pack("<Q", 1)) + bye]),
        "rendezvous_send_done":
            wire_input(0, [op(SEND, 300, P2P | 2)],
                       [message(RV_DONE, struct.pack("<Q", 0)) +
                        message(RV_DONE, struct.pack("<Q", 1)) + bye]),
        "two_lanes": wire_input(1, [op(RECV_EARLY, 2, 7), op(RECV_EARLY, 2, 7)],
                                [message(7, b"l0") + bye, message(7, b"l1") + bye]),
        "three_lanes_peek": wire_input(2 | 4, [op(RECV_EARLY, 1, 3)] * 3,
                                       [message(3, b"a") + bye, message(3, b"b") + bye,
                                        message(3, b"c") + bye]),
        # A message due on a lane after that lane's goodbye never comes (it hung once).
        "due_after_goodbye": wire_input(1, [op(RECV_EARLY, 1, 3)], [bye, message(3, b"a") + bye]),
        "byte_by_byte": wire_input(0, [op(RECV_EARLY, 4, 5), op(RECV_LATE, 2, 6)],
                                   [message(5, b"abcd") + message(6, b"ef") + bye]),
    }
    for name, data in cases.items():
        write("tcp_wire", name, data)
    write_dict("tcp_wire", [struct.pack("<Q", t) for t in (GOODBYE, ABORT, RV_READY, RV_DONE, RV_DATA)]
               + [struct.pack("<Q", RV_BIT), struct.pack("<Q", P2P)])


# ---- tdistrun (tools/tdistrun/options.h, failure.h) ----
FLAGS = ["nproc-per-node", "nnodes", "node-rank", "max-restarts", "monitor-interval",
         "term-timeout", "role", "standalone", "rdzv-backend", "rdzv-endpoint", "rdzv-id",
         "rdzv-conf", "rdzv-timeout", "master-addr", "master-port", "local-addr", "module",
         "no-python", "run-path", "start-method", "log-dir", "redirects", "tee",
         "local-ranks-filter", "help", "help-env", "version"]


def tdistrun():
    argvs = {
        "simple": ["--nproc-per-node", "2", "/bin/true"],
        "equals": ["--nproc_per_node=auto", "--nnodes=1:2", "/bin/true", "a", "--b"],
        "standalone_module": ["--standalone", "-m", "mod", "x"],
        "rdzv": ["--rdzv-backend", "c10d", "--rdzv-endpoint", "[::1]:29500", "--rdzv-id", "j",
                 "--rdzv-conf", "join_timeout=5,last_call_timeout=1,is_host=true", "/bin/true"],
        "static": ["--rdzv-backend=static", "--node-rank", "0", "--master-addr", "127.0.0.1",
                   "--master-port", "29500", "--nnodes", "2", "/bin/true"],
        "streams": ["-r", "0:1,1:2", "-t", "3", "--log-dir", "/tmp", "--local-ranks-filter", "0,1",
                    "/bin/true"],
        "timing": ["--max-restarts=3", "--monitor-interval=0.5", "--term-timeout", "1.5",
                   "--rdzv-timeout", "30", "/bin/true"],
        "python": ["--no-python", "--run-path", "script.py"],
        "help": ["--help"],
        "version": ["--version", "x"],
        "bad_nnodes": ["--nnodes", "3:2", "/bin/true"],
        "missing_value": ["--nproc-per-node"],
    }
    for name, argv in argvs.items():
        write("tdistrun_options", name, "\n".join(argv))
    write("tdistrun_options", "nul_separated", "\0".join(["--role", "trainer", "/bin/true"]))
    write_dict("tdistrun_options", ["--" + f for f in FLAGS] + ["--" + f.replace("-", "_") for f in FLAGS]
               + ["-m", "-r", "-t", "-h", "=", ":", ",", "\n", "auto", "cpu", "static", "c10d"])

    record = {"global_rank": 3, "local_rank": 1, "node_rank": 0, "round": 0, "host": "node-a",
              "exit_code": 1, "signal": 0, "time_us": 1700000000123456, "log_file": "",
              "error_file": "/tmp/e.json", "error": "ValueError: bad",
              "traceback": "Traceback (most recent call last):\nValueError: bad",
              "stderr_tail": "line 1\nline 2\n"}
    write("tdistrun_json", "record", json.dumps(record))
    write("tdistrun_json", "record_signal", json.dumps(dict(record, signal=9, exit_code=0)))
    write("tdistrun_json", "record_missing_field",
          json.dumps({k: v for k, v in record.items() if k != "host"}))
    write("tdistrun_json", "record_wrong_type", json.dumps(dict(record, round="0")))
    write("tdistrun_json", "record_out_of_range", json.dumps(dict(record, global_rank=1 << 40)))
    # 128 + signal overflowed once (summary_exit_code).
    write("tdistrun_json", "record_huge_signal", json.dumps(dict(record, signal=(1 << 31) - 1)))
    write("tdistrun_json", "torch_error_file", json.dumps(
        {"message": {"message": "RuntimeError: oops",
                     "extraInfo": {"py_callstack": "Traceback ...\nRuntimeError: oops",
                                   "timestamp": "1700000000"}}}))
    write("tdistrun_json", "torch_traceback_only", json.dumps(
        {"message": {"extraInfo": {"py_callstack": "Traceback ...\nKeyError: 'x'\n"}}}))
    write("tdistrun_json", "plain_error_file", json.dumps({"message": "boom", "timestamp": 1}))
    write("tdistrun_json", "not_json", "{\"message\": ")
    write("tdistrun_json", "escapes", '{"message": "\\u00e9\\ud83d\\ude00\\n\\u0000"}')
    write_dict("tdistrun_json", ['"%s"' % k for k in record] +
               ['"message"', '"extraInfo"', '"py_callstack"', '"timestamp"', "\\u", "\\ud83d",
                "true", "false", "null", "1e400", "-9223372036854775808", "18446744073709551615",
                "2147483647", "-2147483648", "9223372036854775807"])


# ---- authentication before a transport's hello (transport/auth_exchange.h) ----
def auth():
    def hello_a(magic=0x55416474, version=1, nonce=bytes(range(16))):
        return struct.pack("<IHH", magic, version, 0) + nonce + bytes(16)

    write("auth", "hello_a", hello_a())
    write("auth", "hello_a_and_proof", hello_a() + bytes(32))
    write("auth", "hello_a_version_2", hello_a(version=2) + bytes(range(32)))
    write("auth", "bare_tcp_hello", tcp_hello())
    write("auth", "refusal_magic", struct.pack("<I", 0x4F4E6474) + bytes(36))
    write("auth", "short", struct.pack("<I", 0x55416474))
    write("auth", "challenge_for_initiator", struct.pack("<I", 0) + bytes(range(48)))
    write_dict("auth", [struct.pack("<I", 0x55416474), struct.pack("<I", 0x4F4E6474)])


if __name__ == "__main__":
    auth()
    store()
    hellos()
    wire()
    tdistrun()
