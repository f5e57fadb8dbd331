import { once } from "node:events";
import { connect, createServer, type Server, type Socket } from "node:net";
import {
  H2Connection,
  type H2ConnectionOptions,
} from "../../../../../src/servers/sidecar/grpc/h2/connection.ts";
import {
  CONNECTION_PREFACE,
  FrameType,
  frame,
  settingsFrame,
} from "../../../../../src/servers/sidecar/grpc/h2/frames.ts";

/** A frame the server sent. */
export interface ReceivedFrame {
  readonly type: number;
  readonly flags: number;
  readonly streamId: number;
  readonly payload: Buffer;
}

/**
 * A hand-driven HTTP/2 client for protocol tests: it writes whatever bytes a test gives it
 * (valid or not) and collects the frames the server answers with.
 */
/** Every peer connected, so a suite can close those a failed test left open. */
const openPeers = new Set<RawPeer>();

export function closeAllPeers(): void {
  for (const peer of openPeers) peer.close();
}

export class RawPeer {
  readonly socket: Socket;
  readonly frames: ReceivedFrame[] = [];
  closed = false;
  #input = Buffer.alloc(0);
  #waiters: Array<() => void> = [];

  private constructor(socket: Socket) {
    this.socket = socket;
    socket.on("data", (chunk: Buffer) => {
      this.#input = Buffer.concat([this.#input, chunk]);
      while (this.#input.length >= 9) {
        const length = this.#input.readUIntBE(0, 3);
        if (this.#input.length < 9 + length) break;
        this.frames.push({
          type: this.#input[3] ?? 0,
          flags: this.#input[4] ?? 0,
          streamId: this.#input.readUInt32BE(5) & 0x7fffffff,
          payload: Buffer.from(this.#input.subarray(9, 9 + length)),
        });
        this.#input = this.#input.subarray(9 + length);
      }
      this.#wake();
    });
    socket.on("error", () => undefined);
    socket.on("close", () => {
      this.closed = true;
      this.#wake();
    });
  }

  static async connect(port: number, { preface = true, settings = [] as Array<[number, number]> } = {}) {
    const socket = connect(port, "127.0.0.1");
    await once(socket, "connect");
    const peer = new RawPeer(socket);
    openPeers.add(peer);
    if (preface) socket.write(Buffer.concat([CONNECTION_PREFACE, settingsFrame(settings)]));
    return peer;
  }

  send(...frames: Buffer[]): void {
    this.socket.write(Buffer.concat(frames));
  }

  /** Waits until a received frame matches (or the socket closes, or 2 s pass). */
  async waitFor(match: (f: ReceivedFrame) => boolean): Promise<ReceivedFrame | undefined> {
    const deadline = Date.now() + 2000;
    for (;;) {
      const found = this.frames.find(match);
      if (found !== undefined || this.closed || Date.now() > deadline) return found;
      await new Promise<void>((resolve) => {
        this.#waiters.push(resolve);
        setTimeout(resolve, 50);
      });
    }
  }

  async waitClosed(): Promise<boolean> {
    const deadline = Date.now() + 3000;
    while (!this.closed && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    return this.closed;
  }

  /** The error code of the server's GOAWAY, once it came. */
  async goAwayCode(): Promise<number | undefined> {
    const goAway = await this.waitFor((f) => f.type === FrameType.GOAWAY);
    return goAway?.payload.readUInt32BE(4);
  }

  close(): void {
    openPeers.delete(this);
    this.socket.destroy();
  }

  #wake(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const wake of waiters) wake();
  }
}

export const headersFrame = (streamId: number, block: Buffer, flags: number) =>
  frame(FrameType.HEADERS, flags, streamId, block);

/** A TCP server whose connections are H2Connections with the given options. */
export async function h2Server(
  options: Partial<H2ConnectionOptions> & Pick<H2ConnectionOptions, "onStream">,
): Promise<{ server: Server; port: number; connections: H2Connection[] }> {
  const connections: H2Connection[] = [];
  const server = createServer((socket) => {
    connections.push(
      new H2Connection(socket, {
        maxConcurrentStreams: 100,
        maxHeaderListSize: 16_384,
        streamWindow: 65_535,
        connectionWindow: 1 << 20,
        maxBufferedOutput: 1 << 20,
        maxBufferedInput: 1 << 20,
        prefaceTimeoutMs: 10_000,
        ...options,
      }),
    );
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const address = server.address();
  return { server, port: typeof address === "object" && address !== null ? address.port : 0, connections };
}
