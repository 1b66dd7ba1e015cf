from stack.litellm import main

main()
