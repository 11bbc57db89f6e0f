/*
 * Runs Apache Kafka's command-line tools one after another in one JVM, for
 * tests/integration/test_kafka_cli.py: a JVM per command cost ~1.8 s, most of it starting
 * the JVM and loading the same classes again.
 *
 * Each request on stdin: the magic int, the argument count, each argument (int length +
 * UTF-8), the command's stdin (int length + bytes); the first argument is the tool's main
 * class. Each answer on stdout: the magic int, the exit status, then the command's stdout
 * followed by its stderr (int length + UTF-8), as the Python side joined a subprocess's.
 *
 * A process's end is emulated: Kafka's Exit.exit/halt throw (the tools exit only through
 * them); the first one's status is the command's and what the tool prints after it is
 * dropped (TopicCommand catches Throwable around code that exits: a process would have
 * ended there); the shutdown hooks a tool added run after it ends (ConsoleProducer's
 * closes, so flushes, its producer); an exception out of main is printed as the JVM would
 * and is status 1. System.in, System.out and System.err are the command's own.
 */

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.kafka.common.utils.Exit;

public final class ToolRunner {
    static final int MAGIC = 0x4b544f4f;

    /** Thrown by Exit.exit/halt: unwinds the tool to here with its status. */
    static final class ToolExit extends RuntimeException {
        final int status;

        ToolExit(int status) {
            super("exit " + status, null, false, false);
            this.status = status;
        }
    }

    /** Writes to the current command's buffer (a stream a tool kept still reaches it). */
    static final class Switch extends OutputStream {
        volatile ByteArrayOutputStream target = new ByteArrayOutputStream();

        @Override
        public void write(int b) {
            target.write(b);
        }

        @Override
        public void write(byte[] b, int off, int len) {
            target.write(b, off, len);
        }
    }

    /** The first Exit.exit/halt status of the running command, or null. */
    static volatile Integer exitStatus;

    static void exit(int status, Switch out, Switch err) {
        synchronized (ToolRunner.class) {
            if (exitStatus == null) {
                exitStatus = status;
                out.target = new ByteArrayOutputStream();  // after its end: dropped
                err.target = new ByteArrayOutputStream();
            }
        }
        throw new ToolExit(status);
    }

    public static void main(String[] args) throws IOException {
        DataInputStream control = new DataInputStream(System.in);
        DataOutputStream answer = new DataOutputStream(new PrintStream(System.out));
        Switch out = new Switch();
        Switch err = new Switch();
        System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
        System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
        List<Runnable> hooks = new ArrayList<>();
        Exit.setExitProcedure((status, message) -> exit(status, out, err));
        Exit.setHaltProcedure((status, message) -> exit(status, out, err));
        Exit.setShutdownHookAdder((name, hook) -> {
            synchronized (hooks) {
                hooks.add(hook);
            }
        });
        while (true) {
            String[] argv;
            byte[] stdin;
            try {
                if (control.readInt() != MAGIC) {
                    throw new IOException("bad request");
                }
                argv = new String[control.readInt()];
                for (int i = 0; i < argv.length; i++) {
                    argv[i] = new String(bytes(control), StandardCharsets.UTF_8);
                }
                stdin = bytes(control);
            } catch (EOFException e) {
                System.exit(0);  // the requests' end; a tool's leftover threads end too
                return;
            }
            ByteArrayOutputStream stdout = new ByteArrayOutputStream();
            ByteArrayOutputStream stderr = new ByteArrayOutputStream();
            exitStatus = null;
            out.target = stdout;
            err.target = stderr;
            System.setIn(new ByteArrayInputStream(stdin));
            PrintStream o = new PrintStream(out, true, StandardCharsets.UTF_8);
            PrintStream e = new PrintStream(err, true, StandardCharsets.UTF_8);
            System.setOut(o);
            System.setErr(e);
            int status = run(argv, e);
            o.flush();
            e.flush();
            synchronized (ToolRunner.class) {
                if (exitStatus != null) {
                    status = exitStatus;
                }
                exitStatus = status;  // the hooks' exits change nothing
                out.target = stdout;  // the hooks print, as at a process's end
                err.target = stderr;
            }
            List<Runnable> ran;
            synchronized (hooks) {
                ran = new ArrayList<>(hooks);
                hooks.clear();
            }
            for (Runnable hook : ran) {
                try {
                    hook.run();
                } catch (ToolExit x) {
                    // a hook's exit: the process is ending anyway
                } catch (RuntimeException x) {
                    x.printStackTrace(e);
                }
            }
            o.flush();
            e.flush();
            byte[] text = (stdout.toString(StandardCharsets.UTF_8)
                           + stderr.toString(StandardCharsets.UTF_8))
                    .getBytes(StandardCharsets.UTF_8);
            answer.writeInt(MAGIC);
            answer.writeInt(status);
            answer.writeInt(text.length);
            answer.write(text);
            answer.flush();
        }
    }

    static int run(String[] argv, PrintStream e) {
        try {
            Method main = Class.forName(argv[0]).getMethod("main", String[].class);
            main.invoke(null, (Object) Arrays.copyOfRange(argv, 1, argv.length));
            return 0;
        } catch (InvocationTargetException x) {
            Throwable cause = x.getCause();
            if (cause instanceof ToolExit) {
                return ((ToolExit) cause).status;
            }
            e.print("Exception in thread \"main\" ");
            cause.printStackTrace(e);
            return 1;
        } catch (ReflectiveOperationException x) {
            x.printStackTrace(e);
            return 1;
        }
    }

    static byte[] bytes(DataInputStream in) throws IOException {
        byte[] b = new byte[in.readInt()];
        in.readFully(b);
        return b;
    }
}
