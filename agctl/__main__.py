from agctl.cli import main

main(prog_name="agctl")
