from toycards.cli import main

main()
