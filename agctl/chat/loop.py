"""The chat's loop: read a line, do what it asks, report what failed, go on; leave on
EOFError (Ctrl-D, the end of a pipe) or on a second Ctrl-C at an empty prompt."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from agctl.base.errors import SIGINT, AgctlError, InvalidInput, UsageError, interrupt_signal
from agctl.base.interrupts import interrupt_count, interrupted_since
from agctl.chat.commands import Line, agctl_argv, help_text, parse
from agctl.chat.lines import encodable, history_path, unblocked

if TYPE_CHECKING:
    from pathlib import Path

    from agctl.chat.lines import Reader
    from agctl.store import Store


class Actions(Protocol):
    """What the chat has done for it, as the command line does it (each prints what its
    command prints): a turn on `slot` (None: the current one), a retry, an edit (each the
    slot it committed to), an agctl command line's exit status, the model shown (after
    `session set model` `changed` it), the tools offered shown, the chat's options as argv
    by group (agctl.chat.commands.Slash.takes; all but the slot), a text said (on stderr unless
    not `err`); `report` prints an error as agctl does and gives its exit status."""

    def send(self, session: str, slot: str | None, prompt: str) -> str: ...

    def retry(self, session: str, slot: str | None) -> str: ...

    def edit(self, session: str, slot: str | None, index: int, text: str) -> str: ...

    def command(self, session: str, argv: list[str]) -> int: ...

    def model(self, session: str, changed: bool) -> None: ...

    def tools(self, session: str) -> None: ...

    def passed(self) -> dict[str, list[str]]: ...

    def say(self, text: str, err: bool = True) -> None: ...

    def report(self, error: AgctlError | KeyboardInterrupt) -> int: ...


# What a first Ctrl-C at an empty prompt says.
LEAVE_HINT = "(Ctrl-C again or Ctrl-D to leave)"


class Chat:
    """One chat on `session`, on `slot` (None: whichever is current), reading from
    `reader`; `status` is the exit status of the last thing that failed (0: none did)."""

    def __init__(
        self, store: Store, actions: Actions, reader: Reader, session: str, slot: str | None
    ) -> None:
        self.store = store
        self.actions = actions
        self.reader = reader
        self.session = session
        self.slot = slot
        self.status = 0
        self.unkept: set[str] = set()  # the sessions whose history file failed

    def run(self) -> int:
        """Read and act until the chat is left; the exit status: 0 on a terminal (people
        saw each error), else that of the last failure, so a script can tell. SIGTERM and
        SIGHUP end the chat (128 + the signal), a reply in flight kept as a draft first;
        so does SIGINT unless on a terminal, as it ends any other command."""
        armed = False
        while True:
            try:  # a Ctrl-C between two prompts counts as one at the prompt
                self.reader.use_history(self.history())
                line = self.reader.read(self.prompt(), "")
            except EOFError:
                break
            except KeyboardInterrupt as interrupt:
                signum = interrupt_signal(interrupt)
                if signum != SIGINT or not self.reader.interactive:
                    return 128 + signum
                if armed:
                    break
                self.actions.say(LEAVE_HINT)
                armed = True
                continue
            except AgctlError as error:
                self._failed(self.actions.report(error))
                break
            armed = False
            count = interrupt_count()
            self.handle(line)
            stopped = interrupted_since(count)
            if stopped is not None and (stopped != SIGINT or not self.reader.interactive):
                return 128 + stopped  # only on a terminal does Ctrl-C stop just the reply
        return 0 if self.reader.interactive else self.status

    def history(self) -> Path | None:
        """The session's history file, on a terminal with a data dir on this machine; None
        (the lines kept in memory) when it cannot be opened, said once."""
        local = self.store.local_dir
        if not self.reader.interactive or local is None or self.session in self.unkept:
            return None
        try:
            return history_path(local, self.session)
        except OSError as exc:
            self.unkept.add(self.session)
            self.actions.say(
                f"agctl: warning: the chat history cannot be kept ({exc.filename}: "
                f"{exc.strerror}); Up recalls only this chat's lines"
            )
            return None

    def prompt(self) -> str:
        """`SLOT> `: where the next prompt goes."""
        slot = self.slot or self.store.load_session(self.session).current_slot
        return f"{slot}> "

    def handle(self, text: str) -> None:
        """Do what one line (or block) asks, reporting an error as agctl does."""
        try:
            if not encodable(text):
                raise InvalidInput("the line is not valid UTF-8")
            line = parse(unblocked(text))
            if line.name is None:
                if line.text.strip():
                    self._follow(self.actions.send(self.session, self.slot, line.text))
            else:
                self.command(line)
        except (AgctlError, KeyboardInterrupt) as error:
            self._failed(self.actions.report(error))
        except EOFError:  # the end of a question's input: it is cancelled, not the chat
            self.actions.say("cancelled")

    def command(self, line: Line) -> None:
        """A slash command: the chat's own, or agctl's command line run for it."""
        name, words = line.name, line.words
        if name == "help":
            self.actions.say(help_text(), err=False)
        elif name == "retry":
            _no_words(line)
            self._follow(self.actions.retry(self.session, self.slot))
        elif name == "edit":
            self._edit(words)
        elif name == "fork":
            self._fork(words)
        elif name == "model":
            if len(words) > 1:
                raise UsageError("/model takes one NAME at most")
            if not words or self._run(["session", "set", "model", "--", words[0]]) == 0:
                self.actions.model(self.session, bool(words))
        elif name == "tools":
            _no_words(line)
            if self._run(["tool", "list"]) == 0:
                self.actions.tools(self.session)
        elif name == "diff" and self.slot is not None and len(words) < 2:
            self._run(["slot", "diff", "--", words[0] if words else self._parent(), self.slot])
        else:
            passed = self.actions.passed()
            passed["slot"] = ["--slot", self.slot] if self.slot is not None else []
            if self._run(agctl_argv(line, passed)) == 0 and name == "slot":
                self.slot = words[0]
            self._slot_kept()

    def _parent(self) -> str:
        """/diff's A on the chat's slot: the slot it was derived from."""
        assert self.slot is not None
        parent = self.store.load_slot(self.session, self.slot).config.source.parent_id
        if parent is None:
            raise UsageError(f"slot {self.slot} was not derived from another: /diff A")
        return parent

    def _slot_kept(self) -> None:
        """After a command that may remove slots (/undo, /rollback): a chat on a slot gone
        goes on on the session's current one, and says so."""
        if self.slot is None or self.slot in self.store.slot_ids(self.session):
            return
        current = self.store.load_session(self.session).current_slot
        self.actions.say(f"agctl: slot {self.slot} is gone; the chat goes on on slot {current}")
        self.slot = current

    def _run(self, argv: list[str]) -> int:
        """agctl ARGV's exit status, kept if it failed."""
        return self._failed(self.actions.command(self.session, argv))

    def _failed(self, status: int) -> int:
        if status:
            self.status = status
        return status

    def _follow(self, slot: str) -> None:
        """A turn went to `slot` (a new branch, made current): the chat goes on there."""
        if self.slot is not None:
            self.slot = slot

    def _edit(self, words: list[str]) -> None:
        if not words:
            raise UsageError("/edit needs N, the index of the prompt to edit (see /msgs)")
        try:
            index = int(words[0])
        except ValueError:
            raise UsageError(f"/edit N: {words[0]!r} is not a message index") from None
        text = " ".join(words[1:])
        if not text:
            if not self.reader.interactive:
                raise UsageError("/edit N TEXT: give the new text (no terminal to edit it on)")
            old = self.store.load_slot(self.session, self.slot)
            message = old.messages[old.position(index)]
            try:
                text = unblocked(self.reader.read(f"edit {index}> ", message.text()))
            except EOFError:  # Ctrl-D: the edit is cancelled, not the chat
                self.actions.say(f"/edit {index} cancelled")
                return
        self._follow(self.actions.edit(self.session, self.slot, index, text))

    def _fork(self, words: list[str]) -> None:
        """`ckpt fork` of CKPT, or of the newest checkpoint holding the live state (one
        made first with `ckpt create` if none does); the chat goes on in the new session."""
        if len(words) > 1:
            raise UsageError("/fork takes one checkpoint ID at most")
        checkpoint = words[0] if words else self._live_checkpoint()
        if checkpoint is None:
            if self._run(["ckpt", "create", "--label", "fork"]):
                return
            checkpoint = self._live_checkpoint()
        if checkpoint is None or self._run(["ckpt", "fork", checkpoint]):
            return
        current = self.store.current_session_id()
        if current is not None:
            self.session, self.slot = current, None

    def _live_checkpoint(self) -> str | None:
        """The newest checkpoint that holds the session's live state, if any."""
        from agctl.store.checkpointer import Checkpointer

        keeper = Checkpointer(self.store)
        summaries = keeper.summaries(self.session)[:1]
        live = keeper.matching_live(self.session, summaries)
        return summaries[0].id if summaries and summaries[0].id in live else None


def _no_words(line: Line) -> None:
    if line.words:
        raise UsageError(f"/{line.name} takes no arguments")
