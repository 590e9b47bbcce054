// Command hello is built by testkit's TestBuild.
package main

import "fmt"

func main() { fmt.Println("hello") }
