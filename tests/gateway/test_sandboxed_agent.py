"""A CLI agent in the sandbox (bubblewrap) reaches the gateway through its unix socket, and cannot reach another
local TCP server, nor the gateway's own TCP port; a mode without network isolation is refused."""
import asyncio
import socket

import pytest

from rollart.config import ConfigError
from rollart.gateway.agent_task import AgentRunner, AgentTask
from rollart.gateway.sandboxed import cli_agent
from rollart.sandbox import SandboxConfig
from rollart.sandbox.isolation import mode_works

pytestmark = pytest.mark.timeout(120)

AGENT = r'''
import json, os, socket, sys, urllib.request
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
reply = json.load(urllib.request.urlopen(req, timeout=30))
print("gateway:", json.dumps(reply["rollart"]["completion_token_ids"]))
for name, port in (("other", int(sys.argv[1])), ("gateway-tcp", int(sys.argv[2]))):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
        print(name + ": reached")
    except OSError as e:
        print(name + ": blocked", type(e).__name__)
'''


@pytest.fixture
async def other_server():
    """Another local TCP server the agent must not reach."""
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


@pytest.mark.skipif(not mode_works("bwrap")[0], reason="bubblewrap sandbox unavailable here: "
                    "apt-get install -y bubblewrap")
async def test_cli_agent_reaches_the_gateway_and_nothing_else(served, other_server):
    from rollart.gateway.server import Gateway
    _, proxy, _, tok = served
    gw = await Gateway(proxy, tok, unix_socket=True).start()
    try:
        # the same ports, reached from the host, are open: the sandbox is what blocks them
        socket.create_connection(("127.0.0.1", other_server), timeout=3).close()
        outputs = []
        task = AgentTask("cli", cli_agent(["python3", "agent.py", str(other_server), str(gw.port)],
                                          sandbox=SandboxConfig(mode="bwrap", timeout_s=60, cpu_seconds=60),
                                          files={"agent.py": AGENT},
                                          reward=lambda result, t: outputs.append(result.output) or 1.0),
                         max_new_tokens=4)
        traj = await AgentRunner(gw).run(task, "cli-0", "g", 3)
        assert traj.status == "done", traj.reason
        out = outputs[0]
        model = [t for t, m in zip(traj.token_ids, traj.loss_mask) if m]
        assert f"gateway: {model}".replace(" ", "") in out.replace(" ", "")  # the agent got what was recorded
        assert "other: blocked" in out and "gateway-tcp: blocked" in out, out
    finally:
        await gw.close()


def test_a_sandbox_without_network_isolation_is_refused():
    with pytest.raises(ConfigError, match="no network isolation"):
        cli_agent(["true"], sandbox=SandboxConfig(mode="rlimit"))
