from kernelpro.cli import main

main()
