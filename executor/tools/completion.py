"""Shell completion for `stepgraph`, generated from its argument parser (so it never drifts).

bash: `eval "$(stepgraph completion bash)"`; zsh: `eval "$(stepgraph completion zsh)"` (through
bashcompinit). Completes the commands, each command's options, and file names.
"""

from __future__ import annotations

from typing import Any

BASH = '''_stepgraph() {
  local cur="${COMP_WORDS[COMP_CWORD]}" cmd="${COMP_WORDS[1]}" opts
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W "%(commands)s --help --version" -- "$cur"))
    return
  fi
  case "$cmd" in
%(cases)s
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}
complete -o filenames -F _stepgraph stepgraph
'''


def commands_and_options(parser: Any) -> dict[str, list[str]]:
    """Each command's long options, from the parser's own record of them (executor/__main__.py's
    _Parser: argparse keeps its actions and subparsers in private attributes only)."""
    return {name: sorted(o for o in p.options if o.startswith("--")) for name, p in parser.commands.items()}


def script(shell: str, parser: Any) -> str:
    table = commands_and_options(parser)
    cases = "\n".join(f'    {name}) opts="{" ".join(options)}";;' for name, options in table.items())
    bash = BASH % {"commands": " ".join(table), "cases": cases}
    if shell == "zsh":
        return "autoload -U +X bashcompinit && bashcompinit\n" + bash
    return bash
