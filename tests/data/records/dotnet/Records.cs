// Exceptions for tracehound's corpus of real error records, printed by the .NET runtime (Mono
// here): built by ../generate.py with `mcs -debug` and run with `mono --debug`, so that frames
// carry their files and lines. Frames the tests expect are marked "frame:" on their line.
using System;
using Shop.Orders;

public static class Records
{
    public static int Main(string[] args)
    {
        Console.Error.WriteLine("=== tracehound-record " + args[0] + " ===");
        var checkout = new Checkout();
        switch (args[1])
        {
            case "unhandled":
                checkout.Place(42); // frame: Main
                break;
            case "logged":
                try
                {
                    checkout.Place(43); // frame: Main
                }
                catch (Exception e)
                {
                    Console.Error.WriteLine(e); // Exception.ToString(), as most apps log one
                }
                break;
        }
        return 0;
    }
}
