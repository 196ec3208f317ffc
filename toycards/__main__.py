from toycards.cli import console

console()
