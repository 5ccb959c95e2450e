import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

/**
 * A producer started without a name server address: RocketMQ's client then fetches the list from
 * http://{rocketmq.namesrv.domain}/rocketmq/{rocketmq.namesrv.domain.subgroup} (the address service).
 * usage: java -Drocketmq.namesrv.domain=HOST:PORT NoAddressProducer TOPIC
 * Prints the name server list it was given and the send status; exits 0 iff SEND_OK.
 */
public class NoAddressProducer {
    public static void main(String[] args) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("no_address_" + Long.toHexString(System.nanoTime()));
        producer.setSendMsgTimeout(5000);
        producer.start();
        try {
            System.out.println("namesrv " + producer.getDefaultMQProducerImpl().getmQClientFactory()
                    .getMQClientAPIImpl().getNameServerAddressList());
            SendResult result = null;
            for (int attempt = 0; attempt < 20 && result == null; attempt++) {
                try {
                    result = producer.send(new Message(args[0], "hello".getBytes("UTF-8")));
                } catch (Exception e) {
                    System.out.println("retry: " + e.getMessage().split("\n")[0]);
                    Thread.sleep(500);
                }
            }
            System.out.println("status " + (result == null ? "NONE" : result.getSendStatus()));
            System.exit(result != null && result.getSendStatus().name().equals("SEND_OK") ? 0 : 1);
        } finally {
            producer.shutdown();
        }
    }
}
