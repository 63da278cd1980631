// JGroups 2.12 side of bench/compare.py: the same measurements as the raygroups member
// (bench/compare_member.py), one JVM per member, results as JSON lines on stdout.
//
// bench/compare.py compiles this file with javac into a temporary directory (never commit
// the classes) and runs, with -cp <tmp>:/usr/share/java/jgroups.jar:
//
//   java JgBench tput  <config.xml> <cluster> <index> <members> <size> <count> <warmup> [<timeout s>]
//       Connect, wait for a view of <members>. Member 0 multicasts <warmup> messages, waits
//       1 s, then multicasts <count> messages of <size> bytes as fast as the channel takes
//       them. Every member (the sender included: loopback) counts the measured ones and
//       prints {"first_send": ns} (sender only) and {"last_recv": ns, "received": n}, with
//       System.nanoTime() (CLOCK_MONOTONIC). Throughput = count / (max last_recv - first_send).
//   java JgBench group <config.xml> <cluster> <k>
//       k channels in this JVM, connected one after the other; prints {"ready": k} once the
//       first has a view of k, then keeps them until stdin closes.
//   java JgBench join  <config.xml> <cluster> <trials> <expect>
//       One discarded warm-up join, then <trials> times: a fresh JChannel, time connect()
//       (must end in a view of <expect> members), print {"join_ns": ..}, close, 0.5 s pause.
//
// Any process exits when stdin closes (the bench closes it when it has the figures).
import org.jgroups.JChannel;
import org.jgroups.Message;
import org.jgroups.ReceiverAdapter;
import org.jgroups.View;

import java.io.File;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

public class JgBench {
    static void out(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static void waitStdinClosed() {
        try {
            while (System.in.read() >= 0) { }
        } catch (Exception ignored) { }
    }

    static void waitView(JChannel ch, int n, long timeoutMs) throws Exception {
        long end = System.currentTimeMillis() + timeoutMs;
        while (ch.getView() == null || ch.getView().size() < n) {
            if (System.currentTimeMillis() > end)
                throw new RuntimeException("no view of " + n + " members: " + ch.getView());
            Thread.sleep(5);
        }
    }

    static void putInt(byte[] b, int v) {
        b[0] = (byte) (v >>> 24); b[1] = (byte) (v >>> 16); b[2] = (byte) (v >>> 8); b[3] = (byte) v;
    }

    static int getInt(byte[] b, int off) {
        return ((b[off] & 0xff) << 24) | ((b[off + 1] & 0xff) << 16) | ((b[off + 2] & 0xff) << 8)
            | (b[off + 3] & 0xff);
    }

    static long cpuNanos() {  // this JVM's CPU time: every thread, JIT and GC included
        return ((com.sun.management.OperatingSystemMXBean)
                java.lang.management.ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }

    static class Counter extends ReceiverAdapter {
        final int warmup, count;
        int received;
        volatile long last, cpu0 = -1, cpu1;
        final CountDownLatch done = new CountDownLatch(1);

        Counter(int warmup, int count) { this.warmup = warmup; this.count = count; }

        public void receive(Message m) {
            int seq = getInt(m.getRawBuffer(), m.getOffset());
            if (seq < warmup) return;
            synchronized (this) {
                if (received++ == 0 && cpu0 < 0)
                    cpu0 = cpuNanos();
                if (received == count) {
                    last = System.nanoTime();
                    cpu1 = cpuNanos();
                    done.countDown();
                }
            }
        }
    }

    static void tput(String[] a) throws Exception {
        String config = a[1], cluster = a[2];
        int index = Integer.parseInt(a[3]), n = Integer.parseInt(a[4]);
        int size = Integer.parseInt(a[5]), count = Integer.parseInt(a[6]);
        int warmup = Integer.parseInt(a[7]);
        int timeout = a.length > 8 ? Integer.parseInt(a[8]) : 300;
        JChannel ch = new JChannel(new File(config));
        Counter c = new Counter(warmup, count);
        ch.setReceiver(c);
        ch.connect(cluster);
        waitView(ch, n, 60000);
        out("{\"joined\": " + ch.getView().size() + "}");
        if (index == 0) {
            Thread.sleep(500);  // let every member install the full view
            for (int i = 0; i < warmup; i++) {
                byte[] b = new byte[size];
                putInt(b, i);
                ch.send(new Message(null, null, b));
            }
            Thread.sleep(1000);
            c.cpu0 = cpuNanos();
            long first = System.nanoTime();
            for (int i = warmup; i < warmup + count; i++) {
                byte[] b = new byte[size];  // JGroups keeps the buffer until it is stable
                putInt(b, i);
                ch.send(new Message(null, null, b));
            }
            out("{\"first_send\": " + first + "}");
        }
        if (!c.done.await(timeout, TimeUnit.SECONDS))
            out("{\"error\": \"received " + c.received + " of " + count + " in " + timeout
                + " s, view " + ch.getView() + "\"}");
        else
            out("{\"last_recv\": " + c.last + ", \"received\": " + c.received
                + ", \"cpu_s\": " + (c.cpu1 - c.cpu0) / 1e9 + "}");
        waitStdinClosed();
        Runtime.getRuntime().halt(0);
    }

    static void group(String[] a) throws Exception {
        String config = a[1], cluster = a[2];
        int k = Integer.parseInt(a[3]);
        List<JChannel> chans = new ArrayList<>();
        for (int i = 0; i < k; i++) {
            JChannel ch = new JChannel(new File(config));
            ch.connect(cluster);
            chans.add(ch);
        }
        waitView(chans.get(0), k, 60000);
        out("{\"ready\": " + k + "}");
        waitStdinClosed();
        Runtime.getRuntime().halt(0);
    }

    static void join(String[] a) throws Exception {
        String config = a[1], cluster = a[2];
        int trials = Integer.parseInt(a[3]), expect = Integer.parseInt(a[4]);
        for (int t = -1; t < trials; t++) {
            JChannel ch = new JChannel(new File(config));
            long t0 = System.nanoTime();
            ch.connect(cluster);
            long dt = System.nanoTime() - t0;
            View v = ch.getView();
            int size = v == null ? 0 : v.size();
            if (t >= 0)
                out("{\"join_ns\": " + dt + ", \"view\": " + size + "}");
            if (size != expect)
                out("{\"error\": \"joined a view of " + size + ", expected " + expect + "\"}");
            ch.close();
            Thread.sleep(500);
        }
        out("{\"done\": true}");
        waitStdinClosed();
        Runtime.getRuntime().halt(0);
    }

    public static void main(String[] a) throws Exception {
        try {
            switch (a[0]) {
                case "tput": tput(a); break;
                case "group": group(a); break;
                case "join": join(a); break;
                default: throw new IllegalArgumentException("unknown mode " + a[0]);
            }
        } catch (Throwable e) {
            out("{\"error\": \"" + e.toString().replace("\\", "/").replace("\"", "'") + "\"}");
            Runtime.getRuntime().halt(1);
        }
    }
}
