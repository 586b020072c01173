package com.shop.orders;

/**
 * Runs the Java record programs named on the command line, in one JVM, all writing to stderr.
 * Before each record it prints a separator line that ../generate.py splits on and drops.
 * Arguments: any of "jul", "logback", "log4j2" (loaded by name, so that a missing logging
 * library only leaves its class out of the build), then optionally "uncaught", which ends the
 * JVM with an exception that nobody catches, after one in another thread. stdout carries only
 * the line "java.version=...".
 */
public final class RecordsMain {
    static void separator(String stem) {
        System.err.println("=== tracehound-record " + stem + " ===");
        System.err.flush();
    }

    public static void main(String[] args) throws Exception {
        System.out.println("java.version=" + System.getProperty("java.version"));
        boolean uncaught = false;
        for (String arg : args) {
            switch (arg) {
                case "jul": new JulRecords().run(); break;
                case "logback": load("com.shop.orders.LogbackRecords").run(); break;
                case "log4j2": load("com.shop.orders.Log4j2Records").run(); break;
                case "uncaught": uncaught = true; break;
                default: throw new IllegalArgumentException("unknown program " + arg);
            }
        }
        if (uncaught) {
            Thread worker = new Thread(() -> new Inventory().reserve("sku-123", 2), "inventory-sync");
            separator("jvm--uncaught-thread");
            worker.start();
            worker.join();
            separator("jvm--uncaught-main");
            new Checkout().submit(new int[] {1, 2, 3}, 3);
        }
    }

    private static Runnable load(String className) throws ReflectiveOperationException {
        return (Runnable) Class.forName(className).getDeclaredConstructor().newInstance();
    }
}
