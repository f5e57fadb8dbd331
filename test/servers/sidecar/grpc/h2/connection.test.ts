import assert from "node:assert/strict";
import { connect } from "node:http2";
import { after, before, describe, it } from "node:test";
import fc from "fast-check";
import type { H2Stream } from "../../../../../src/servers/sidecar/grpc/h2/connection.ts";
import {
  Flag,
  FrameType,
  frame,
  H2Error,
  Setting,
  uint32Frame,
} from "../../../../../src/servers/sidecar/grpc/h2/frames.ts";
import { encodeHeaderBlock } from "../../../../../src/servers/sidecar/grpc/h2/hpack.ts";
import { exchange } from "../../../../helpers/http2-exchange.ts";
import { closeAllPeers, h2Server, headersFrame, RawPeer } from "./raw-peer.ts";

/**
 * The sidecar's HTTP/2 connection at the frame level: a real node:http2 client (nghttp2's
 * encoder: Huffman strings, dynamic table) for interoperability, and a raw peer for what a
 * well-behaved client never sends.
 */

const REQUEST = encodeHeaderBlock([
  [":method", "POST"],
  [":scheme", "http"],
  [":path", "/echo"],
  [":authority", "localhost"],
]);
/** A request the suite's server holds unanswered. */
const HOLD = encodeHeaderBlock([
  [":method", "POST"],
  [":scheme", "http"],
  [":path", "/hold"],
]);
const OK = encodeHeaderBlock([[":status", "200"]]);
const TRAILERS = encodeHeaderBlock([["x-done", "1"]]);

/** Answers every request with its headers as JSON and the number of body bytes in a trailer-free body. */
function echo(stream: H2Stream): void {
  let bytes = 0;
  stream.onData = (chunk) => {
    bytes += chunk.length;
  };
  stream.onEnd = () => {
    const body = Buffer.from(JSON.stringify({ headers: stream.headers, bytes }));
    if (stream.headers["x-reply-size"] !== undefined) {
      stream.respond(OK);
      stream.sendData(Buffer.alloc(Number(stream.headers["x-reply-size"]), 7));
      stream.sendTrailers(TRAILERS);
      return;
    }
    stream.respondComplete(OK, body, TRAILERS);
  };
}

describe("HTTP/2 connection", () => {
  let port: number;
  let close: () => void;
  let closedStreams = 0;

  before(async () => {
    const started = await h2Server({
      maxConcurrentStreams: 4,
      onStream(stream) {
        echo(stream);
        if (stream.headers[":path"] === "/hold") {
          stream.onEnd = () => undefined;
          stream.onClose = () => {
            closedStreams++;
          };
        }
      },
    });
    port = started.port;
    close = () => started.server.close();
  });
  after(() => {
    closeAllPeers();
    close();
  });

  it("talks to node:http2: any header names and values, Huffman-coded and indexed, over one connection", async () => {
    const session = connect(`http://127.0.0.1:${port}`);
    try {
      const request = async (headers: Record<string, string>, body: Buffer) => {
        const reply = await exchange(session, { ":method": "POST", ":path": "/echo", ...headers }, body);
        const json = JSON.parse(reply.body.toString()) as { headers: Record<string, string>; bytes: number };
        return { response: reply.headers, trailers: reply.trailers, json };
      };
      const name = fc.stringMatching(/^x-[a-z0-9-]{1,20}$/);
      const value = fc.stringMatching(/^[\x21-\x7e]([\x20-\x7e]{0,60}[\x21-\x7e])?$/);
      await fc.assert(
        fc.asyncProperty(
          fc.dictionary(name, value, { maxKeys: 8 }),
          fc.integer({ min: 0, max: 70_000 }),
          async (headers, size) => {
            const reply = await request(headers, Buffer.alloc(size, 1));
            assert.equal(reply.response[":status"], 200);
            assert.equal(reply.trailers["x-done"], "1");
            assert.equal(reply.json.bytes, size);
            for (const [key, text] of Object.entries(headers)) assert.equal(reply.json.headers[key], text);
            assert.equal(reply.json.headers[":path"], "/echo");
          },
        ),
        { numRuns: 60 },
      );
      // A response larger than the client's stream window is sent as the window opens.
      const big = (await exchange(session, { ":method": "POST", ":path": "/echo", "x-reply-size": "300000" }))
        .body.length;
      assert.equal(big, 300_000);
      // A client that turns its HPACK table off needs a table size update at the start of each block.
      const tableless = connect(`http://127.0.0.1:${port}`, { settings: { headerTableSize: 0 } });
      try {
        const status = await new Promise<unknown>((resolve, reject) => {
          const stream = tableless.request({ ":method": "POST", ":path": "/echo" });
          stream.on("response", (h) => resolve(h[":status"]));
          stream.on("error", reject);
          stream.resume();
          stream.end();
        });
        assert.equal(status, 200);
      } finally {
        tableless.close();
      }
    } finally {
      session.close();
    }
  });

  it("answers PING and acknowledges SETTINGS", async () => {
    const peer = await RawPeer.connect(port);
    peer.send(frame(FrameType.PING, 0, 0, Buffer.from("12345678")));
    const pong = await peer.waitFor((f) => f.type === FrameType.PING);
    assert.equal(pong?.flags, Flag.ACK);
    assert.equal(pong?.payload.toString(), "12345678");
    assert.ok(await peer.waitFor((f) => f.type === FrameType.SETTINGS && f.flags === Flag.ACK));
    peer.close();
  });

  it("holds its output to the client's window, and sends the rest as WINDOW_UPDATEs arrive", async () => {
    const peer = await RawPeer.connect(port, { settings: [[Setting.INITIAL_WINDOW_SIZE, 100]] });
    const block = encodeHeaderBlock([
      [":method", "POST"],
      [":scheme", "http"],
      [":path", "/echo"],
      ["x-reply-size", "250"],
    ]);
    peer.send(headersFrame(1, block, Flag.END_HEADERS | Flag.END_STREAM));
    await peer.waitFor((f) => f.type === FrameType.DATA);
    await new Promise((r) => setTimeout(r, 50));
    const sent = () =>
      peer.frames.filter((f) => f.type === FrameType.DATA).reduce((n, f) => n + f.payload.length, 0);
    assert.equal(sent(), 100);
    peer.send(uint32Frame(FrameType.WINDOW_UPDATE, 1, 1000));
    const trailers = await peer.waitFor(
      (f) => f.type === FrameType.HEADERS && (f.flags & Flag.END_STREAM) !== 0,
    );
    assert.ok(trailers);
    assert.equal(sent(), 250);
    peer.close();
  });

  it("a window the client lowers below zero holds output until it is positive again", async () => {
    const peer = await RawPeer.connect(port);
    const block = encodeHeaderBlock([
      [":method", "POST"],
      [":scheme", "http"],
      [":path", "/echo"],
      ["x-reply-size", "70000"],
    ]);
    const sent = () =>
      peer.frames.filter((f) => f.type === FrameType.DATA).reduce((n, f) => n + f.payload.length, 0);
    peer.send(headersFrame(1, block, Flag.END_HEADERS | Flag.END_STREAM));
    while (sent() < 65_535) await peer.waitFor((f) => f.type === FrameType.DATA && sent() >= 65_535);
    assert.equal(sent(), 65_535);
    // The stream's window becomes 0 - 65,535; the connection's is opened wide.
    peer.send(
      frame(FrameType.SETTINGS, 0, 0, Buffer.from([0, Setting.INITIAL_WINDOW_SIZE, 0, 0, 0, 0])),
      uint32Frame(FrameType.WINDOW_UPDATE, 0, 1_000_000),
      uint32Frame(FrameType.WINDOW_UPDATE, 1, 65_535),
    );
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(sent(), 65_535);
    peer.send(uint32Frame(FrameType.WINDOW_UPDATE, 1, 10_000));
    assert.ok(await peer.waitFor((f) => f.type === FrameType.HEADERS && (f.flags & Flag.END_STREAM) !== 0));
    assert.equal(sent(), 70_000);
    peer.close();
  });

  it("refuses streams over the concurrency limit, and tells the application when a client resets one", async () => {
    const peer = await RawPeer.connect(port);
    for (const id of [1, 3, 5, 7, 9]) peer.send(headersFrame(id, HOLD, Flag.END_HEADERS | Flag.END_STREAM));
    const refused = await peer.waitFor((f) => f.type === FrameType.RST_STREAM && f.streamId === 9);
    assert.equal(refused?.payload.readUInt32BE(0), H2Error.REFUSED_STREAM);
    const before = closedStreams;
    peer.send(uint32Frame(FrameType.RST_STREAM, 1, H2Error.CANCEL));
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(closedStreams, before + 1);
    peer.close();
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(closedStreams, before + 4);
  });

  it("resets malformed requests and keeps the connection", async () => {
    const peer = await RawPeer.connect(port);
    const malformed = [
      encodeHeaderBlock([
        [":method", "POST"],
        [":scheme", "http"],
      ]), // no :path
      encodeHeaderBlock([
        [":method", "POST"],
        [":scheme", "http"],
        [":path", "/"],
        ["X-Upper", "1"],
      ]),
      encodeHeaderBlock([
        [":method", "POST"],
        [":scheme", "http"],
        [":path", "/"],
        ["connection", "close"],
      ]),
      encodeHeaderBlock([
        ["a", "1"],
        [":method", "POST"],
        [":scheme", "http"],
        [":path", "/"],
      ]),
      encodeHeaderBlock([
        [":method", "POST"],
        [":scheme", "http"],
        [":path", "/"],
        [":protocol", "x"],
      ]),
    ];
    for (const [i, block] of malformed.entries()) {
      peer.send(headersFrame(1 + 2 * i, block, Flag.END_HEADERS | Flag.END_STREAM));
    }
    for (let i = 0; i < malformed.length; i++) {
      const reset = await peer.waitFor((f) => f.type === FrameType.RST_STREAM && f.streamId === 1 + 2 * i);
      assert.equal(reset?.payload.readUInt32BE(0), H2Error.PROTOCOL_ERROR, `case ${i}`);
    }
    peer.send(headersFrame(11, REQUEST, Flag.END_HEADERS | Flag.END_STREAM));
    assert.ok(await peer.waitFor((f) => f.type === FrameType.DATA && f.streamId === 11));
    peer.close();
  });

  it("reads frames that arrive a byte at a time", async () => {
    const peer = await RawPeer.connect(port);
    const bytes = Buffer.concat([
      headersFrame(1, REQUEST, Flag.END_HEADERS),
      frame(FrameType.DATA, Flag.END_STREAM, 1, Buffer.alloc(300, 1)),
    ]);
    for (const byte of bytes) {
      peer.socket.write(Buffer.from([byte]));
      await new Promise((r) => setImmediate(r));
    }
    const data = await peer.waitFor((f) => f.type === FrameType.DATA && f.streamId === 1);
    assert.equal(JSON.parse(String(data?.payload)).bytes, 300);
    peer.close();
  });

  /** Opens 1,100 held streams, each followed by `reset(id)`; the connection must end in ENHANCE_YOUR_CALM. */
  const resetStorm = async (reset: (id: number) => Buffer): Promise<void> => {
    const peer = await RawPeer.connect(port);
    const frames: Buffer[] = [];
    for (let id = 1; id < 2 * 1100; id += 2) {
      frames.push(headersFrame(id, HOLD, Flag.END_HEADERS | Flag.END_STREAM), reset(id));
    }
    peer.send(...frames);
    assert.equal(await peer.goAwayCode(), H2Error.ENHANCE_YOUR_CALM);
    assert.ok(await peer.waitClosed());
  };

  it("closes a connection that opens and resets streams without end (rapid reset)", () =>
    resetStorm((id) => uint32Frame(FrameType.RST_STREAM, id, H2Error.CANCEL)));

  // A zero window increment on an open stream is a stream error: this side resets it.
  it("streams the peer makes this side reset count against the same budget (MadeYouReset)", () =>
    resetStorm((id) => uint32Frame(FrameType.WINDOW_UPDATE, id, 0)));

  it("request data held by open streams is bounded per connection", async () => {
    const started = await h2Server({ onStream: () => undefined });
    try {
      const peer = await RawPeer.connect(started.port);
      const frames: Buffer[] = [];
      // 20 streams × 60,000 bytes, none ended: over the 1 MiB the test server holds.
      for (let id = 1; id < 40; id += 2) {
        frames.push(headersFrame(id, REQUEST, Flag.END_HEADERS));
        for (let i = 0; i < 4; i++) frames.push(frame(FrameType.DATA, 0, id, Buffer.alloc(15_000)));
      }
      peer.send(...frames);
      assert.equal(await peer.goAwayCode(), H2Error.ENHANCE_YOUR_CALM);
    } finally {
      closeAllPeers();
      started.server.close();
    }
  });

  it("a handler that throws resets its own stream only", async () => {
    const started = await h2Server({
      onStream(stream) {
        if (stream.headers[":path"] === "/throw") throw new Error("handler bug");
        echo(stream);
      },
    });
    try {
      const peer = await RawPeer.connect(started.port);
      const throwing = encodeHeaderBlock([
        [":method", "POST"],
        [":scheme", "http"],
        [":path", "/throw"],
      ]);
      peer.send(
        headersFrame(1, throwing, Flag.END_HEADERS | Flag.END_STREAM),
        headersFrame(3, REQUEST, Flag.END_HEADERS | Flag.END_STREAM),
      );
      const reset = await peer.waitFor((f) => f.type === FrameType.RST_STREAM && f.streamId === 1);
      assert.equal(reset?.payload.readUInt32BE(0), H2Error.INTERNAL_ERROR);
      assert.ok(await peer.waitFor((f) => f.type === FrameType.DATA && f.streamId === 3));
    } finally {
      closeAllPeers();
      started.server.close();
    }
  });

  it("ends the connection with the right GOAWAY code on protocol violations", async () => {
    const cases: Array<{ name: string; code: number; frames: Buffer[]; preface?: boolean }> = [
      {
        name: "not HTTP/2",
        code: H2Error.PROTOCOL_ERROR,
        frames: [Buffer.from("GET / HTTP/1.1\r\n\r\n")],
        preface: false,
      },
      {
        name: "first frame not SETTINGS",
        code: H2Error.PROTOCOL_ERROR,
        frames: [frame(FrameType.PING, 0, 0, Buffer.alloc(8))],
        preface: false,
      },
      {
        name: "frame over 16 KiB",
        code: H2Error.FRAME_SIZE_ERROR,
        frames: [frame(0xfa, 0, 0, Buffer.alloc(16_385))],
      },
      {
        name: "even stream id",
        code: H2Error.PROTOCOL_ERROR,
        frames: [headersFrame(2, REQUEST, Flag.END_HEADERS)],
      },
      {
        name: "DATA on an idle stream",
        code: H2Error.PROTOCOL_ERROR,
        frames: [frame(FrameType.DATA, 0, 7, Buffer.alloc(1))],
      },
      {
        name: "bad HPACK",
        code: H2Error.COMPRESSION_ERROR,
        frames: [headersFrame(1, Buffer.from([0x80]), Flag.END_HEADERS)],
      },
      {
        name: "CONTINUATION flood",
        code: H2Error.ENHANCE_YOUR_CALM,
        frames: [
          headersFrame(1, REQUEST, 0),
          ...Array.from({ length: 3 }, () => frame(FrameType.CONTINUATION, 0, 1, Buffer.alloc(8000, 0x82))),
        ],
      },
      {
        name: "flood of empty CONTINUATION frames",
        code: H2Error.ENHANCE_YOUR_CALM,
        frames: [
          headersFrame(1, REQUEST, 0),
          ...Array.from({ length: 2000 }, () => frame(FrameType.CONTINUATION, 0, 1)),
        ],
      },
      {
        name: "short GOAWAY",
        code: H2Error.FRAME_SIZE_ERROR,
        frames: [frame(FrameType.GOAWAY, 0, 0, Buffer.alloc(4))],
      },
      {
        name: "interleaved frame inside a header block",
        code: H2Error.PROTOCOL_ERROR,
        frames: [headersFrame(1, REQUEST, 0), frame(FrameType.PING, 0, 0, Buffer.alloc(8))],
      },
      {
        name: "zero window increment",
        code: H2Error.PROTOCOL_ERROR,
        frames: [uint32Frame(FrameType.WINDOW_UPDATE, 0, 0)],
      },
      {
        name: "PUSH_PROMISE from a client",
        code: H2Error.PROTOCOL_ERROR,
        frames: [frame(FrameType.PUSH_PROMISE, 0, 1, Buffer.alloc(4))],
      },
    ];
    for (const { name, code, frames, preface } of cases) {
      const peer = await RawPeer.connect(port, { preface: preface ?? true });
      peer.send(...frames);
      assert.equal(await peer.goAwayCode(), code, name);
      assert.ok(await peer.waitClosed(), `${name}: connection closed`);
    }
  });

  it("random frames after a valid preface: answered or GOAWAY, never a crash; the server keeps serving", async () => {
    const anyFrame = fc
      .record({
        type: fc.integer({ min: 0, max: 10 }),
        flags: fc.integer({ min: 0, max: 255 }),
        streamId: fc.oneof(fc.constantFrom(0, 1, 3, 5), fc.integer({ min: 0, max: 2 ** 31 - 1 })),
        payload: fc.oneof(fc.uint8Array({ maxLength: 40 }), fc.constant(REQUEST)),
      })
      .map(({ type, flags, streamId, payload }) => frame(type, flags, streamId, payload));
    await fc.assert(
      fc.asyncProperty(fc.array(anyFrame, { minLength: 1, maxLength: 12 }), async (frames) => {
        const peer = await RawPeer.connect(port);
        peer.send(...frames, frame(FrameType.PING, 0, 0, Buffer.from("lastping")));
        // Either the PING is answered (everything before it was taken) or the connection ends.
        const pong = await peer.waitFor(
          (f) =>
            f.type === FrameType.GOAWAY || (f.type === FrameType.PING && f.payload.toString() === "lastping"),
        );
        assert.ok(pong !== undefined || peer.closed, "neither answered nor closed");
        peer.close();
      }),
      { numRuns: 150 },
    );
    const check = await RawPeer.connect(port);
    check.send(headersFrame(1, REQUEST, Flag.END_HEADERS | Flag.END_STREAM));
    assert.ok(await check.waitFor((f) => f.type === FrameType.DATA && f.streamId === 1));
    check.close();
  });

  it("a connection that never sends the preface and SETTINGS is cut", async () => {
    const started = await h2Server({ prefaceTimeoutMs: 100, onStream: echo });
    try {
      const silent = await RawPeer.connect(started.port, { preface: false });
      assert.ok(await silent.waitClosed());
      // One that does is kept.
      const talking = await RawPeer.connect(started.port);
      await new Promise((r) => setTimeout(r, 200));
      assert.equal(talking.closed, false);
    } finally {
      closeAllPeers();
      started.server.close();
    }
  });

  it("more DATA than a stream's window is a flow-control error on that stream", async () => {
    const started = await h2Server({ streamWindow: 1000, onStream: echo });
    try {
      const peer = await RawPeer.connect(started.port);
      peer.send(headersFrame(1, REQUEST, Flag.END_HEADERS), frame(FrameType.DATA, 0, 1, Buffer.alloc(1001)));
      const reset = await peer.waitFor((f) => f.type === FrameType.RST_STREAM && f.streamId === 1);
      assert.equal(reset?.payload.readUInt32BE(0), H2Error.FLOW_CONTROL_ERROR);
      // The connection lives on.
      peer.send(headersFrame(3, REQUEST, Flag.END_HEADERS | Flag.END_STREAM));
      assert.ok(await peer.waitFor((f) => f.type === FrameType.DATA && f.streamId === 3));
    } finally {
      closeAllPeers();
      started.server.close();
    }
  });

  it("goAway(): GOAWAY with the last stream, the open stream still answered, then the socket ends", async () => {
    let held: H2Stream | undefined;
    const started = await h2Server({
      onStream(stream) {
        held = stream;
      },
    });
    try {
      const peer = await RawPeer.connect(started.port);
      peer.send(headersFrame(1, REQUEST, Flag.END_HEADERS | Flag.END_STREAM));
      while (held === undefined) await new Promise((r) => setTimeout(r, 5));
      started.connections[0]?.goAway();
      const goAway = await peer.waitFor((f) => f.type === FrameType.GOAWAY);
      assert.equal(goAway?.payload.readUInt32BE(0), 1);
      assert.equal(goAway?.payload.readUInt32BE(4), H2Error.NO_ERROR);
      // New streams after GOAWAY are ignored.
      peer.send(headersFrame(3, REQUEST, Flag.END_HEADERS | Flag.END_STREAM));
      held.respondComplete(OK, Buffer.from("late"), TRAILERS);
      const data = await peer.waitFor((f) => f.type === FrameType.DATA);
      assert.equal(data?.payload.toString(), "late");
      assert.ok(await peer.waitClosed());
      assert.equal(peer.frames.filter((f) => f.streamId === 3).length, 0);
    } finally {
      started.server.close();
    }
  });
});
