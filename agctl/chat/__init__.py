"""`agctl chat`: an interactive loop over a session's slot, whose slash commands are agctl's
own commands, so the chat and the command line never disagree.

- `agctl.chat.commands` parses a line: a prompt, or a slash command from SLASH, most of them
  the argv of an agctl command (/slots is `slot list`), run by the command line as it runs
  that command, so the same library call prints the same thing.
- `agctl.chat.lines` reads lines: on a terminal with prompt_toolkit (history per session in
  a 0600 file of the data dir, `\"\"\"` blocks and Esc-Enter for several lines, Ctrl-C that
  clears a line or, at an empty prompt, asks to be pressed again to leave), from a pipe
  line by line, so scripts can drive a chat. prompt_toolkit is imported only there.
- `agctl.chat.loop` runs the loop: what the line asks for is done by `Actions`, which the
  command line gives (a turn sent as `turn send` sends it, an error reported as any
  command's), and the chat follows the session and slot the commands move it to.

Nothing here imports click: the command line is one implementation of `Actions`.
"""
