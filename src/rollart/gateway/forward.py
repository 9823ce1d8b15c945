"""Runs inside an agent's sandbox (stdlib only): listen on 127.0.0.1:PORT in the sandbox's own network namespace,
forward each connection to the gateway's unix socket, and run the agent's command until it exits.

    python3 forward.py SOCKET PORT COMMAND...

The sandbox has no other network: the agent reaches the gateway through this and nothing else.
"""
import asyncio
import sys


async def _pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def _main(socket_path, port, command):
    async def handle(reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(socket_path)
        except OSError as e:
            print(f"forward: cannot reach the gateway at {socket_path}: {e}", file=sys.stderr)
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    proc = await asyncio.create_subprocess_exec(*command)
    code = await proc.wait()
    server.close()
    return code


if __name__ == "__main__":
    sys.exit(asyncio.run(_main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])))
