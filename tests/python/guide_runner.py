"""Runs code blocks of a reference guide as written, with only IPs and ports changed, in one
namespace, driven over stdin by test_guides.py:

    python3 guide_runner.py <guide.md> <blocking|asyncio> '<json {"text": "replacement"} or {"port": port}>'

    RUN 3 4   -> runs python blocks 3 then 4, prints "OK" or "ERR <exception type> <message>"
    EVAL expr -> prints "VAL <repr of expr>"
    EXIT      -> exits

In asyncio mode `hmc.create_session` makes an AsyncSession and every call of it that returns an
awaitable is awaited (the guides' code with `await` added, nothing else).
"""
import ast
import asyncio
import functools
import json
import re
import sys

import hmc

AWAITED = {"init_server", "connect", "wait_peer", "disconnect", "close_server", "close", "put_remote", "get_remote",
           "wait", "put_batch", "get_batch", "put_pipeline", "get_pipeline", "put", "get", "get_into",
           "put_torch_cuda", "get_torch_cuda", "buffer_put_then_put", "get_then_buffer_get_into", "send_data_to",
           "recv_data_from", "ctrl_send", "ctrl_recv"}


def python_blocks(path):
    text = open(path, encoding="utf-8").read()
    return [code for lang, code in re.findall(r"```(\w*)\n(.*?)```", text, re.S) if lang == "python"]


def substitute(code, changes):
    for old, new in changes.items():
        code = re.sub(rf"\b{re.escape(old)}\b", new, code) if old.isdigit() else code.replace(old, new)
    return code


class AwaitSessionCalls(ast.NodeTransformer):
    """sess.put(...) -> await sess.put(...) for the calls that return awaitables."""

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in AWAITED and isinstance(f.value, ast.Name) and \
                f.value.id == "sess":
            return ast.Await(node)
        return node


def main():
    path, mode, changes = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    blocks = [substitute(b, changes) for b in python_blocks(path)]
    namespace = {"__name__": "__guide__"}
    loop = asyncio.new_event_loop()
    if mode == "asyncio":
        # The one line an asyncio user changes. This runner runs the event loop only while a block
        # runs (it reads stdin in between): an in-thread AsyncSession would make no progress then
        # (peers could not connect), so it keeps the session's own thread, as such a program must.
        hmc.create_session = functools.partial(hmc.AsyncSession, progress_thread="own")
    for line in sys.stdin:
        command, _, rest = line.strip().partition(" ")
        if command == "EXIT":
            break
        if command == "EVAL":
            print("VAL", repr(eval(rest, namespace)), flush=True)  # noqa: S307 - the test's own expression
            continue
        try:
            for index in map(int, rest.split()):
                tree = ast.parse(blocks[index])
                if mode == "asyncio":
                    tree = ast.fix_missing_locations(AwaitSessionCalls().visit(tree))
                code = compile(tree, f"<guide block {index}>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                result = eval(code, namespace)  # noqa: S307 - the guide's example code
                if asyncio.iscoroutine(result):
                    loop.run_until_complete(result)
            print("OK", flush=True)
        except Exception as e:  # noqa: BLE001 - reported to the test
            print("ERR", type(e).__name__, str(e).replace("\n", " "), flush=True)


if __name__ == "__main__":
    main()
