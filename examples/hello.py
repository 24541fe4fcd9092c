"""The smallest flow: two nodes, one message. ``fluksio run examples/hello.py -p name=you``."""

from fluksio import Flow

flow = Flow("hello", inputs={"name": (str, "world")}, outputs=["greeting"])


@flow.node(provides="shout")
def upper(name: str) -> str:
    return name.upper()


@flow.node(provides="greeting")
def greet(shout: str) -> str:
    return f"hello, {shout}!"
